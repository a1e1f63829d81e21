/**
 * Applies pending migrations at start-up (and in the test setup) through
 * node-pg-migrate's programmatic runner, so there is no separate migration
 * step to forget. Migrations are plain `.sql` files in `<root>/migrations`
 * with `-- Up Migration` / `-- Down Migration` markers.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { runner } from 'node-pg-migrate';

// This module runs from src/db/ (tsx, vitest) and from dist/src/db/ (after
// `tsc`), while migrations/ stays at the project root and is never copied.
const MIGRATION_DIR_CANDIDATES = ['../../migrations', '../../../migrations'].map((rel) =>
  fileURLToPath(new URL(rel, import.meta.url)),
);

function migrationsDir(): string {
  const dir = MIGRATION_DIR_CANDIDATES.find((candidate) => existsSync(candidate));
  if (dir === undefined) {
    throw new Error(`migrations folder not found (looked in ${MIGRATION_DIR_CANDIDATES.join(', ')})`);
  }
  return dir;
}

/**
 * Give `databaseUrl` a direct connection (DATABASE_LISTEN_URL when the service
 * is behind a pooler): the runner holds a session-level advisory lock. Its
 * session has no statement timeout, whatever the role's (set for PgBouncer's
 * sessions, docs/operations.md): a migration may rewrite a large table.
 */
export async function migrate(databaseUrl: string, log?: (msg: string) => void): Promise<void> {
  const dbClient = new pg.Client({ connectionString: databaseUrl, options: '-c statement_timeout=0' });
  await dbClient.connect();
  try {
    await runMigrations(dbClient, log);
  } finally {
    await dbClient.end();
  }
}

async function runMigrations(dbClient: pg.Client, log?: (msg: string) => void): Promise<void> {
  await runner({
    dbClient,
    dir: migrationsDir(),
    direction: 'up',
    migrationsTable: 'pgmigrations',
    checkOrder: true,
    // The runner's own default is a transaction per file; one transaction for
    // the whole batch (the CLI's default) never leaves a half-migrated schema.
    singleTransaction: true,
    // Several instances starting together queue up instead of all but one
    // failing with "Another migration is already running".
    advisoryLockMode: 'wait',
    // Without a log function the runner prints to the console.
    log: log ?? (() => {}),
  });
}
