/**
 * Reads of one row by id. On a pool, lookups arriving while their batch waits for a client share
 * its one `= ANY($1)` statement (dataloader keeps the batch), so none waits longer than the pool's queue.
 */
import DataLoader from 'dataloader';
import pg from 'pg';
import type { Queryable } from './pool.js';
import { prepared } from './sql.js';

/** `byIds` takes an array of ids as `$1`. */
export function lookup<T extends { id: number }>(statements: { byId: string; byIds: string }) {
  async function read(db: Queryable, ids: readonly number[]) {
    const { rows } = await db.query<T>(
      ids.length === 1 ? prepared(statements.byId, [ids[0]]) : prepared(statements.byIds, [ids]),
    );
    const found = new Map(rows.map((row) => [Number(row.id), row]));
    return ids.map((id) => found.get(id));
  }

  function loaderOn(pool: pg.Pool) {
    let client: Promise<pg.PoolClient>;
    // The batch stays open until it has a client; it is then read on that client.
    const batchScheduleFn = (dispatch: () => void) => void (client = pool.connect()).then(dispatch, dispatch);
    return new DataLoader<number, T | undefined>(
      async (ids) => {
        const taken = await client;
        // A checked-out client has no pool listener; as pg-pool's query() does, a failed one is replaced.
        let failure: Error | undefined;
        const onError = (error: Error) => (failure = error);
        taken.on('error', onError);
        try {
          return await read(taken, ids);
        } catch (error) {
          failure ??= error as Error;
          throw error;
        } finally {
          taken.off('error', onError);
          taken.release(failure);
        }
      },
      { cache: false, batchScheduleFn },
    );
  }

  const loaders = new WeakMap<pg.Pool, DataLoader<number, T | undefined>>();
  return async (db: Queryable, id: number): Promise<T | undefined> => {
    if (!(db instanceof pg.Pool)) return (await read(db, [id]))[0];
    let loader = loaders.get(db);
    if (!loader) loaders.set(db, (loader = loaderOn(db)));
    return loader.load(id);
  };
}
