/**
 * Reads of one row by id that coalesce while the pool is busy: lookups queued
 * behind it share one `= ANY($1)` statement, socket write and round trip, and
 * none waits longer than it would have in the pool's queue.
 */
import type pg from 'pg';
import type { Queryable } from './pool.js';
import { prepared } from './sql.js';

interface Batch<T> {
  ids: number[];
  waiters: Map<number, { resolve(row: T | undefined): void; reject(error: unknown): void }[]>;
}

export interface LookupStatements {
  byId: string;
  /** `$1` is an array of ids. */
  byIds: string;
}

function isPool(db: Queryable): db is pg.Pool {
  return 'idleCount' in db && 'totalCount' in db && 'options' in db;
}

type Lookup = (id: number) => Promise<unknown>;
const lookups = new WeakMap<pg.Pool, Map<string, Lookup>>();

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
