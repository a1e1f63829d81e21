/**
 * The PostgreSQL pool. int8 columns (ids, counts) arrive as JS numbers: ids stay
 * far below 2^53. Timeouts are bounded so a stalled database turns into a quick
 * 503 instead of piling up requests; the pool reconnects by itself when the
 * database comes back.
 */
import pg from 'pg';

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
  });
  // An idle client losing its connection (database restart) must not crash the
  // process; the pool drops it and the next query opens a fresh one.
  pool.on('error', () => undefined);
  return pool;
}

/** Runs fn in one transaction: committed if it resolves, rolled back (nothing partial kept) if it throws. */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}
