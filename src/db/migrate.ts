/**
 * Applies pending migrations (`npm run migrate`, the embedded development
 * database at start, the test setup) through node-pg-migrate's programmatic
 * runner, and tells how a database's schema stands against the migrations
 * this version ships (start-up and readiness). Migrations are plain `.sql`
 * files in `<root>/migrations` with `-- Up Migration` / `-- Down Migration`
 * markers; node-pg-migrate records each one applied in MIGRATIONS_TABLE.
 */
import { existsSync, readdirSync } from 'node:fs';
import { parse } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { codeOf, type Queryable } from './pool.js';

const MIGRATIONS_TABLE = 'pgmigrations';

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
    migrationsTable: MIGRATIONS_TABLE,
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

/** The migrations this version ships, by the name node-pg-migrate records (the file name without extension). */
export function shippedMigrations(): string[] {
  return readdirSync(migrationsDir())
    .filter((file) => file.endsWith('.sql'))
    .map((file) => parse(file).name)
    .sort();
}

export interface SchemaState {
  /** Shipped, not applied: the schema is behind this version (`npm run migrate`). */
  missing: string[];
  /** Applied, not shipped: a newer version migrated it (normal during a rolling upgrade). */
  unknown: string[];
}

/** How the schema of `db` stands against `shipped`; a database never migrated has none applied. */
export async function schemaState(db: Queryable, shipped: readonly string[]): Promise<SchemaState> {
  let applied: string[] = [];
  try {
    applied = (await db.query<{ name: string }>(`SELECT name FROM ${MIGRATIONS_TABLE}`)).rows.map((row) => row.name);
  } catch (error) {
    if (codeOf(error) !== '42P01') throw error; // undefined_table: nothing applied yet
  }
  const known = new Set(shipped);
  const done = new Set(applied);
  return { missing: shipped.filter((name) => !done.has(name)), unknown: applied.filter((name) => !known.has(name)) };
}
