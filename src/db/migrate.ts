/** Runs node-pg-migrate, and tells how a schema stands against the migrations this version ships. */
import { readdirSync } from 'node:fs';
import { parse } from 'node:path';
import pg from 'pg';
import { PG_MIGRATE_LOCK_ID, runner } from 'node-pg-migrate';
import { atRoot } from '../root.js';
import { codeOf, type Queryable } from './pool.js';

const MIGRATIONS_TABLE = 'pgmigrations';
/** node-pg-migrate's ignorePattern: files in migrations/ that are not migrations (released.json: the frozen checksums). */
export const NOT_MIGRATIONS = '(\\..*|released\\.json)';

const migrationsDir = (): string => atRoot('migrations');

/** A direct connection (the runner holds a session-level advisory lock), no statement timeout. */
export async function migrate(databaseUrl: string, log: (msg: string) => void = () => {}): Promise<void> {
  const dbClient = new pg.Client({ connectionString: databaseUrl, options: '-c statement_timeout=0' });
  await dbClient.connect();
  try {
    // The runner's own lock, taken first (it nests): no other version migrates between this check and the run.
    await dbClient.query('SELECT pg_advisory_lock($1)', [PG_MIGRATE_LOCK_ID]);
    const { unknown } = await schemaState(dbClient, shippedMigrations());
    if (unknown.length > 0) throw new Error(refusal(unknown));
    // Never a half-migrated schema; instances starting together queue up.
    const options = { singleTransaction: true, advisoryLockMode: 'wait', checkOrder: true } as const;
    await runner({
      dbClient,
      dir: migrationsDir(),
      ignorePattern: NOT_MIGRATIONS,
      direction: 'up',
      migrationsTable: MIGRATIONS_TABLE,
      log,
      ...options,
    });
  } finally {
    await dbClient.end();
  }
}

/**
 * Applied migrations this version does not ship: a newer version or another build migrated the database, and this
 * one cannot tell whether its own would still apply on top (docs/operations.md, "Upgrading from a release").
 */
function refusal(unknown: readonly string[]): string {
  return (
    `the database has applied migrations that this version does not ship (${unknown.join(', ')}): a newer version ` +
    'or another build migrated it. Nothing was changed. Migrate it with that version or a newer one, or restore the ' +
    'backup taken before the upgrade. This version can still serve on it, started with DATABASE_URL'
  );
}

export function shippedMigrations(): string[] {
  return readdirSync(migrationsDir())
    .filter((file) => file.endsWith('.sql'))
    .map((file) => parse(file).name)
    .sort();
}

export interface SchemaState {
  missing: string[];
  /** Applied, not shipped: served during a rolling upgrade, refused by `migrate`. */
  unknown: string[];
}

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
