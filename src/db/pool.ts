/**
 * The PostgreSQL pool. int8 columns (ids, counts) arrive as JS numbers: ids stay
 * far below 2^53. Timeouts are bounded so a stalled database turns into a quick
 * 503 instead of piling up requests; the pool reconnects by itself when the
 * database comes back.
 */
import pg from 'pg';

/** The channel on which changes to posts or comments are announced (src/plugins/response-cache.ts). */
export const CHANGES_CHANNEL = 'posts_api_changed';

/**
 * Settings of every pool connection. `posts_api.notifies` tells the
 * change_notifications migration's triggers that this session announces its
 * changes itself, after they commit: a NOTIFY inside the writing transaction
 * would serialize every commit behind PostgreSQL's single notification lock.
 * Statements are prepared by name (src/db/sql.ts `prepared`) and planned under
 * PostgreSQL's default plan_cache_mode (auto): forcing a custom plan for every
 * execution made a point lookup spend three times as long planning as running.
 */
export const SESSION_OPTIONS = '-c posts_api.notifies=after_commit';

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20 ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

export function createPool(connectionString: string, max: number): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    types,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    statement_timeout: 10_000,
    idle_in_transaction_session_timeout: 15_000,
    application_name: 'posts-api',
    options: SESSION_OPTIONS,
  });
  // An idle client losing its connection (database restart) must not crash the
  // process; the pool drops it and the next query opens a fresh one.
  pool.on('error', () => undefined);
  return pool;
}

/** Runs fn in one transaction: committed if it resolves, rolled back (nothing partial kept) if it throws. */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // A checked-out client has no pool listener: a connection lost mid-transaction
  // (database restart) would be an unhandled 'error' event and crash the process.
  // The query in flight rejects by itself; the lost client is discarded, not reused.
  let lost: Error | undefined;
  const onError = (error: Error) => {
    lost = error;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.off('error', onError);
    client.release(lost);
  }
}
