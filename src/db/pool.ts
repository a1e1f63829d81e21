/**
 * The PostgreSQL pool. int8 columns (ids, counts) arrive as JS numbers: ids stay
 * far below 2^53. Timeouts are bounded so a stalled database turns into a quick
 * 503 instead of piling up requests; the pool reconnects by itself when the
 * database comes back.
 *
 * Transactions (withTransaction) are re-run from the start, a bounded number of
 * times, when PostgreSQL aborts them for a serialization failure (40001), a
 * deadlock (40P01) or a named statement a pooler lost (LOST_STATEMENT, below):
 * the whole transaction is the unit of retry, so nothing of a failed attempt
 * survives and callers' functions must only touch the database through the
 * client they are given (no other side effects).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { LRUCache } from 'lru-cache';

/** The channel on which changes to posts or comments are announced (src/cache/change-bus.ts). */
export const CHANGES_CHANNEL = 'posts_api_changed';

/**
 * The application_name of the service's pool connections. It also tells the
 * posts_changed and comments_changed triggers that these sessions announce
 * their changes themselves, after they commit (a NOTIFY inside the writing
 * transaction would serialize every commit behind PostgreSQL's single
 * notification lock):
 * application_name is the one startup parameter PgBouncer passes on to every
 * server connection it lends in transaction mode, so this works behind it.
 */
export const APPLICATION_NAME = 'posts-api';

/**
 * The older form of the same signal (`posts_api.notifies`), kept for tools
 * that can only set options (pgbench's PGOPTIONS in the bench).
 * Statements are prepared by name (src/db/sql.ts `prepared`) and planned under
 * PostgreSQL's default plan_cache_mode (auto): forcing a custom plan for every
 * execution made a point lookup spend three times as long planning as running.
 *
 * JIT compilation is off (behind PgBouncer: the role's setting, like the
 * timeouts): it starts when a plan's estimated cost passes jit_above_cost, and
 * a search page's plan carries the cost of reading every match in a branch
 * that runs only for rare words (src/db/pagination/offset.ts), so a page that reads
 * 25 rows in 0.3 ms spent 30–40 ms compiling expressions. No statement of this
 * service runs long enough for compiled expressions to pay that back.
 */
export const SESSION_OPTIONS = '-c posts_api.notifies=after_commit -c jit=off';

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/**
 * A memory this instance keeps per database handle (the pool, a replica's
 * pool), made on first use and dropped with the handle: at most `max` entries,
 * the one set longest ago going first when full (read them with `peek` and
 * `has`, which leave that order alone).
 */
export function perDatabase<V extends NonNullable<unknown>>(max: number): (db: Queryable) => LRUCache<string, V> {
  const memories = new WeakMap<Queryable, LRUCache<string, V>>();
  return (db) => {
    let memory = memories.get(db);
    if (memory === undefined) memories.set(db, (memory = new LRUCache<string, V>({ max })));
    return memory;
  };
}

const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

export interface PoolOptions {
  /** Longest a statement may run (ms) before PostgreSQL cancels it (SQLSTATE 57014). */
  statementTimeoutMs?: number;
  /** Told about errors of idle clients (e.g. the server closed their connection). */
  onIdleError?: (error: Error) => void;
  /**
   * Named prepared statements (default true). False sends every statement
   * unnamed (parsed on each run), for a pooler in transaction mode that cannot
   * follow names across its server connections (PgBouncer < 1.21, or without
   * max_prepared_statements). With true, the pool finds such a pooler by itself
   * (LOST_STATEMENT) and goes on unnamed.
   */
  preparedStatements?: boolean;
  /** Told once, when the pool stops naming statements because a pooler lost one. */
  onStatementNamesLost?: (error: Error) => void;
}

/**
 * A named statement that the server connection does not have (26000) or
 * already has (42P05): a pooler in transaction mode ran the client's Bind, or
 * its Parse, on another server connection than the one it prepared it on.
 * Either way the statement did not run.
 */
const LOST_STATEMENT = new Set(['26000', '42P05']);

/** The `code` of an error: a SQLSTATE, a Node.js error code or ours (POOL_EXHAUSTED). */
export const codeOf = (error: unknown): string => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
};

/** The code of a wait for a free client that outlasted the connection timeout while the database answers. */
export const POOL_EXHAUSTED = 'POOL_EXHAUSTED';

type Named = { name: unknown; text: string };
const isNamed = (config: unknown): config is Named =>
  typeof config === 'object' &&
  config !== null &&
  'name' in config &&
  'text' in config &&
  Boolean((config as Named).name);
function unnamed(config: Named): unknown {
  const { name: _name, ...rest } = config;
  return rest;
}

/**
 * The client class of one pool. Once `named` is false (set so, or after a
 * LOST_STATEMENT) it drops statement names. The statement that met the loss is
 * sent again unnamed when it ran on its own (transaction status idle: nothing
 * else was affected); inside a transaction block the failure aborted the whole
 * transaction, so it is withTransaction that runs it again.
 */
function clientClass(named: boolean, onLost: (error: Error) => void): typeof pg.Client {
  return class extends pg.Client {
    /** After a LOST_STATEMENT: from now on unnamed; whether the statement may be sent again here. */
    private retriable(error: unknown): boolean {
      if (!LOST_STATEMENT.has(codeOf(error))) return false;
      if (named) {
        named = false;
        onLost(error as Error);
      }
      return this.getTransactionStatus() === 'I';
    }

    override query(...args: unknown[]): never {
      const send = super.query as (...a: unknown[]) => never;
      const config = args[0];
      if (!isNamed(config)) return send.apply(this, args);
      if (!named) {
        args[0] = unnamed(config);
        return send.apply(this, args);
      }
      const last = args.length - 1;
      const callback = args[last];
      // pg-pool's query() passes a callback; a checked-out client's caller awaits the promise.
      if (typeof callback === 'function') {
        args[last] = (error: unknown, result: unknown) => {
          if (!this.retriable(error)) return (callback as (e: unknown, r: unknown) => void)(error, result);
          args[0] = unnamed(config);
          args[last] = callback;
          send.apply(this, args);
        };
        return send.apply(this, args);
      }
      return (send.apply(this, args) as Promise<unknown>).catch((error: unknown) => {
        if (!this.retriable(error)) throw error;
        args[0] = unnamed(config);
        return send.apply(this, args);
      }) as never;
    }
  };
}

/**
 * A pool that tells a wait for a free client past connectionTimeoutMillis
 * while clients are connected (the database answers, every client is busy:
 * POOL_EXHAUSTED) from one while none is (the database does not answer).
 */
class ServicePool extends pg.Pool {
  readonly connected = new Set<pg.PoolClient>();

  constructor(config: pg.PoolConfig) {
    super(config);
    this.on('connect', (client) => this.connected.add(client));
    this.on('remove', (client) => this.connected.delete(client));
  }

  private explain(error: unknown): unknown {
    if (
      error instanceof Error &&
      error.message === 'timeout exceeded when trying to connect' &&
      this.connected.size > 0
    ) {
      Object.assign(error, { code: POOL_EXHAUSTED });
    }
    return error;
  }

  override connect(...args: unknown[]): never {
    const connect = (super.connect as (...a: unknown[]) => never).bind(this);
    const [callback] = args;
    if (typeof callback !== 'function')
      return (connect() as Promise<pg.PoolClient>).catch((error: unknown) =>
        Promise.reject(this.explain(error)),
      ) as never;
    return connect((error: unknown, ...rest: unknown[]) =>
      (callback as (...a: unknown[]) => void)(this.explain(error), ...rest),
    );
  }
}

export function createPool(connectionString: string, max: number, options: PoolOptions = {}): pg.Pool {
  const pool = new ServicePool({
    connectionString,
    max,
    types,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    // The timeouts travel in `options`, the one startup parameter PgBouncer can
    // be told to ignore (ignore_startup_parameters = options); behind it they are
    // the database role's settings instead (docs/operations.md).
    options: `${SESSION_OPTIONS} -c statement_timeout=${options.statementTimeoutMs ?? 10_000} -c idle_in_transaction_session_timeout=15000`,
    application_name: APPLICATION_NAME,
    Client: clientClass(options.preparedStatements !== false, options.onStatementNamesLost ?? (() => undefined)),
  });
  // An idle client losing its connection (database restart) must not crash the
  // process; the pool drops it and the next query opens a fresh one.
  const onIdleError = options.onIdleError ?? (() => undefined);
  pool.on('error', (error) => onIdleError(error));
  return pool;
}

/**
 * SQLSTATEs after which running the same transaction again can succeed: a
 * serialization failure or deadlock, and a named statement a pooler lost (the
 * pool sends statements unnamed from then on).
 */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01', ...LOST_STATEMENT]);
/** Attempts in all; a conflict that outlasts them is reported (503, plugins/errors.ts). */
export const TRANSACTION_ATTEMPTS = 3;

const isRetryable = (error: unknown) => RETRYABLE_SQLSTATES.has(codeOf(error));

/**
 * Runs fn in one transaction: committed if it resolves, rolled back (nothing
 * partial kept) if it throws. Serialization failures and deadlocks re-run it
 * after a short random pause, so two colliding requests do not collide again.
 */
export function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return retryingConflicts(() => transactionOnce(pool, fn));
}

/**
 * Runs an atomic unit (a transaction, or one statement in autocommit, which
 * PostgreSQL also aborts for a conflict under REPEATABLE READ or SERIALIZABLE)
 * again after a serialization failure or deadlock, a bounded number of times.
 */
export async function retryingConflicts<T>(unit: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await unit();
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
