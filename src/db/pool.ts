/**
 * The PostgreSQL pool. int8 columns (ids, counts) arrive as JS numbers: ids stay
 * far below 2^53. Timeouts are bounded so a stalled database turns into a quick
 * 503 instead of piling up requests; the pool reconnects by itself when the
 * database comes back.
 *
 * Transactions (withTransaction) are re-run from the start, a bounded number of
 * times, when PostgreSQL aborts them for a serialization failure (40001) or a
 * deadlock (40P01): the whole transaction is the unit of retry, so nothing of a
 * failed attempt survives and callers' functions must only touch the database
 * through the client they are given (no other side effects).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

/** The channel on which changes to posts or comments are announced (src/plugins/response-cache.ts). */
export const CHANGES_CHANNEL = 'posts_api_changed';

/**
 * Settings of every pool connection. `posts_api.notifies` tells the
 * change_notifications migration's triggers that this session announces its
 * changes itself, after they commit: a NOTIFY inside the writing transaction
 * would serialize every commit behind PostgreSQL's single notification lock.
 */
export const SESSION_OPTIONS = '-c plan_cache_mode=force_custom_plan -c posts_api.notifies=after_commit';

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20 ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/** A guard: SQL texts are built from constant fragments only, so there are a few dozen. */
const MAX_PREPARED_STATEMENTS = 500;

/**
 * Statements with parameters run as named prepared statements, one per distinct
 * SQL text and connection, so PostgreSQL parses and analyzes each text once per
 * connection instead of on every request (a third of the database's work for a
 * list page). They are still planned for each execution's own values
 * (plan_cache_mode = force_custom_plan), exactly as unnamed statements are.
 */
function prepareStatements(pool: pg.Pool): void {
  const names = new Map<string, string>();
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED_STATEMENTS) {
      name = `posts_api_${names.size + 1}`;
      names.set(text, name);
    }
    return name;
  };
  pool.on('connect', (client) => {
    const query = client.query as (...args: unknown[]) => unknown;
    client.query = function (this: pg.PoolClient, ...args: unknown[]) {
      const [config, values] = args;
      if (typeof config === 'string' && Array.isArray(values) && values.length > 0) {
        const name = nameOf(config);
        if (name !== undefined) return query.call(this, { name, text: config, values }, ...args.slice(2));
      } else if (config !== null && typeof config === 'object' && !('name' in config) && 'text' in config) {
        const q = config as { text: string; values?: unknown[] };
        const name = q.values?.length ? nameOf(q.text) : undefined;
        if (name !== undefined) return query.call(this, { ...q, name }, ...args.slice(1));
      }
      return query.apply(this, args);
    } as typeof client.query;
  });
}

export interface PoolOptions {
  /** Longest a statement may run (ms) before PostgreSQL cancels it (SQLSTATE 57014). */
  statementTimeoutMs?: number;
  /** Told about errors of idle clients (e.g. the server closed their connection). */
  onIdleError?: (error: Error) => void;
}

export function createPool(connectionString: string, max: number, options: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    types,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    statement_timeout: options.statementTimeoutMs ?? 10_000,
    idle_in_transaction_session_timeout: 15_000,
    application_name: 'posts-api',
    options: SESSION_OPTIONS,
  });
  prepareStatements(pool);
  // An idle client losing its connection (database restart) must not crash the
  // process; the pool drops it and the next query opens a fresh one.
  const onIdleError = options.onIdleError ?? (() => undefined);
  pool.on('error', (error) => onIdleError(error));
  return pool;
}

/** SQLSTATEs after which running the same transaction again can succeed. */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);
/** Attempts in all; a conflict that outlasts them is reported (503, plugins/errors.ts). */
export const TRANSACTION_ATTEMPTS = 3;

const isRetryable = (error: unknown) => RETRYABLE_SQLSTATES.has((error as { code?: string } | null)?.code ?? '');

/**
 * Runs fn in one transaction: committed if it resolves, rolled back (nothing
 * partial kept) if it throws. Serialization failures and deadlocks re-run it
 * after a short random pause, so two colliding requests do not collide again.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await transactionOnce(pool, fn);
    } catch (error) {
      if (!isRetryable(error) || attempt >= TRANSACTION_ATTEMPTS) throw error;
      await sleep(attempt * (5 + Math.random() * 20));
    }
  }
}

async function transactionOnce<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // A checked-out client has no pool listener: a connection broken mid-transaction
  // (database restart) would be an unhandled 'error' event and crash the process.
  // The query in flight rejects by itself; the broken client is discarded, not reused.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    // A client whose ROLLBACK failed may still be inside the transaction (or
    // broken): it is destroyed below instead of going back to the pool.
    await client.query('ROLLBACK').catch((rollbackError: Error) => {
      broken ??= rollbackError;
    });
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
