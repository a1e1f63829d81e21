/**
 * Reads of one row by id that coalesce while the pool is busy. A lookup
 * arriving when a connection is free runs alone, as `byId`, at once; one
 * arriving while every connection is taken joins a batch that waits for the
 * next free connection, and the batch then runs as one `byIds` statement
 * (`= ANY($1)`) for every id gathered meanwhile.
 *
 * Why: under load, a request for one post spent about half of the service's
 * busy time in socket writes, its statement's and its answer's (V8 profile of
 * the bench's random-id reads), and PostgreSQL runs a statement per request.
 * Requests queued behind a busy pool cost one statement, one write and one
 * round trip between them instead of one each, and none waits longer than
 * it would have in the pool's queue. Each batch is its own statement, so what
 * it reads is as fresh as a statement sent for each request after it arrived.
 */
import type pg from 'pg';
import type { Queryable } from './pool.js';
import { prepared } from './sql.js';

interface Batch<T> {
  ids: number[];
  waiters: Map<number, { resolve(row: T | undefined): void; reject(error: unknown): void }[]>;
}

export interface LookupStatements {
  /** One row: `$1` is the id. */
  byId: string;
  /** Several rows: `$1` is an array of ids; each row has `id`. */
  byIds: string;
}

/** Whether `db` is a pool (lookups through it may coalesce) rather than one transaction's client. */
function isPool(db: Queryable): db is pg.Pool {
  return 'idleCount' in db && 'totalCount' in db && 'options' in db;
}

type Lookup = (id: number) => Promise<unknown>;
/** One coalescing lookup per pool and statement, whichever repository instance asks. */
const lookups = new WeakMap<pg.Pool, Map<string, Lookup>>();

/** The row with this id, through `db`: coalesced with concurrent lookups when `db` is a busy pool. */
export function findOne<T extends { id: number }>(
  db: Queryable,
  statements: LookupStatements,
  id: number,
): Promise<T | undefined> {
  if (!isPool(db)) return db.query<T>(prepared(statements.byId, [id])).then(({ rows }) => rows[0]);
  let byStatement = lookups.get(db);
  if (!byStatement) lookups.set(db, (byStatement = new Map()));
  let lookup = byStatement.get(statements.byId);
  if (!lookup) byStatement.set(statements.byId, (lookup = coalescingLookup<T>(db, statements)));
  return lookup(id) as Promise<T | undefined>;
}

function coalescingLookup<T extends { id: number }>(pool: pg.Pool, statements: LookupStatements) {
  let open: Batch<T> | null = null;

  async function run(batch: Batch<T>): Promise<void> {
    let client: pg.PoolClient | undefined;
    let failure: Error | undefined;
    // A checked-out client has no pool listener: an 'error' event would otherwise be unhandled.
    const onError = (error: Error) => {
      failure = error;
    };
    try {
      client = await pool.connect();
      client.on('error', onError);
      // From here on, lookups start a new batch.
      if (open === batch) open = null;
      const { rows } =
        batch.ids.length === 1
          ? await client.query<T>(prepared(statements.byId, batch.ids))
          : await client.query<T>(prepared(statements.byIds, [batch.ids]));
      const found = new Map(rows.map((row) => [Number(row.id), row]));
      for (const [id, waiters] of batch.waiters) for (const w of waiters) w.resolve(found.get(id));
    } catch (error) {
      failure ??= error as Error;
      if (open === batch) open = null;
      for (const waiters of batch.waiters.values()) for (const w of waiters) w.reject(error);
    } finally {
      client?.off('error', onError);
      // As pg-pool's own query() does: a client whose statement failed is replaced.
      client?.release(failure);
    }
  }

  return function lookup(id: number): Promise<T | undefined> {
    return new Promise<T | undefined>((resolve, reject) => {
      let batch = open;
      if (batch === null) {
        batch = { ids: [], waiters: new Map() };
        open = batch;
        setImmediate(() => void run(batch!));
      }
      let waiters = batch.waiters.get(id);
      if (!waiters) {
        batch.waiters.set(id, (waiters = []));
        batch.ids.push(id);
      }
      waiters.push({ resolve, reject });
    });
  };
}
