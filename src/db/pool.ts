/** The pool and withTransaction, re-run whole after a conflict: its function touches only its client. */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { beginTransaction } from './trace-context.js';

/** Tells the change triggers these sessions NOTIFY after commit themselves (PgBouncer passes it on). */
export const APPLICATION_NAME = 'posts-api';

// `posts_api.notifies` is the same signal for tools that can only set options (pgbench).
// JIT is off: search plans carry costs past jit_above_cost that no statement here pays back.
export const SESSION_OPTIONS = '-c posts_api.notifies=after_commit -c jit=off -c TimeZone=UTC -c DateStyle=ISO';

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/**
 * A timestamptz as the API shows it (2026-11-22T10:00:00.123Z): to_char cost PostgreSQL about 1 µs a value. The
 * pool's sessions are in UTC (SESSION_OPTIONS); another offset (a pooler ignores options) takes the slow path.
 */
export function isoTimestamp(text: string): string {
  if (text[10] === ' ' && text.endsWith('+00') && (text.length === 22 || text[19] === '.')) {
    const fraction = text.length === 22 ? '000' : `${text.slice(20, -3)}00`.slice(0, 3);
    return `${text.slice(0, 10)}T${text.slice(11, 19)}.${fraction}Z`;
  }
  return (pg.types.getTypeParser(1184)(text) as Date).toISOString();
}

const PARSERS: Partial<Record<number, (text: string) => unknown>> = { 20: Number, 1184: isoTimestamp };
const types = {
  getTypeParser: ((oid: number, format?: string) =>
    PARSERS[oid] ?? pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

export interface PoolOptions {
  statementTimeoutMs?: number;
  /** How long a request waits for a connection, a free one or a new one (pg-pool has one timer for both). */
  connectTimeoutMs?: number;
  onIdleError?: (error: Error) => void;
  /** Called once, when a pooler that cannot follow statement names (LOST_STATEMENT) makes the pool drop them. */
  onStatementNamesLost?: (error: Error) => void;
}

// A pooler in transaction mode ran Bind or Parse on another server connection; nothing ran.
const LOST_STATEMENT = new Set(['26000', '42P05']);

export const codeOf = (error: unknown): string => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
};

/** A wait for a free client timed out while the database answers (every client busy). */
export const POOL_EXHAUSTED = 'POOL_EXHAUSTED';

type Named = { name?: unknown; text: string };
const isNamed = (config: unknown): config is Named => Boolean((config as Named | null)?.name);
const unnamed = ({ name: _name, ...rest }: Named) => rest;

/** Drops statement names once one was lost. A lost statement outside a transaction block is re-sent. */
function clientClass(onLost: (error: Error) => void): typeof pg.Client {
  let named = true;
  return class extends pg.Client {
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
      const sendUnnamed = () => {
        args[0] = unnamed(config);
        return send.apply(this, args);
      };
      if (!named) return sendUnnamed();
      const last = args.length - 1;
      const callback = args[last];
      // pg-pool's query() passes a callback; a checked-out client's caller awaits the promise.
      if (typeof callback === 'function') {
        args[last] = (error: unknown, result: unknown) => {
          if (!this.retriable(error)) return (callback as (e: unknown, r: unknown) => void)(error, result);
          args[last] = callback;
          sendUnnamed();
        };
        return send.apply(this, args);
      }
      return (send.apply(this, args) as Promise<unknown>).catch((error: unknown) => {
        if (!this.retriable(error)) throw error;
        return sendUnnamed();
      }) as never;
    }
  };
}

/** Tells a busy pool (POOL_EXHAUSTED) from an unreachable database on a connect timeout. */
class ServicePool extends pg.Pool {
  readonly connected = new Set<pg.PoolClient>();

  constructor(config: pg.PoolConfig) {
    super(config);
    this.on('connect', (client) => this.connected.add(client));
    this.on('remove', (client) => this.connected.delete(client));
  }

  private explain(error: unknown): unknown {
    const timedOut = error instanceof Error && error.message === 'timeout exceeded when trying to connect';
    return timedOut && this.connected.size > 0 ? Object.assign(error, { code: POOL_EXHAUSTED }) : error;
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
    connectionTimeoutMillis: options.connectTimeoutMs ?? 3000,
    idleTimeoutMillis: 30_000,
    // Behind PgBouncer `options` is ignored and the role's settings apply (docs/operations.md).
    options: `${SESSION_OPTIONS} -c statement_timeout=${options.statementTimeoutMs ?? 10_000} -c idle_in_transaction_session_timeout=15000`,
    application_name: APPLICATION_NAME,
    Client: clientClass(options.onStatementNamesLost ?? (() => undefined)),
  });
  // An idle client losing its connection must not crash the process.
  const onIdleError = options.onIdleError ?? (() => undefined);
  pool.on('error', (error) => onIdleError(error));
  return pool;
}

const RETRYABLE_SQLSTATES = new Set(['40001', '40P01', ...LOST_STATEMENT]);
export const TRANSACTION_ATTEMPTS = 3;

const isRetryable = (error: unknown) => RETRYABLE_SQLSTATES.has(codeOf(error));

export function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return retryingConflicts(() => transactionOnce(pool, fn));
}

/** Also for single autocommit statements (those that write set their trace context themselves: db/trace-context.ts). */
export async function retryingConflicts<T>(unit: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await unit();
    } catch (error) {
      if (!isRetryable(error) || attempt >= TRANSACTION_ATTEMPTS) throw error;
      await sleep(attempt * (5 + Math.random() * 20)); // random, so colliders do not collide again
    }
  }
}

async function transactionOnce<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // A checked-out client has no pool listener: an unhandled 'error' would crash the process.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    // With the writer's trace context, if it has one: the events of the transaction's writes store it.
    await client.query(beginTransaction());
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    // A client whose ROLLBACK failed may still be in the transaction: destroy it.
    await client.query('ROLLBACK').catch((rollbackError: Error) => {
      broken ??= rollbackError;
    });
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
