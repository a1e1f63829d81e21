/** Reads of one row by id: lookups made in the same turn of the event loop share one `= ANY($1)` statement. */
import DataLoader from 'dataloader';
import type { Queryable } from './pool.js';
import { perDatabase } from './per-database.js';
import { prepared } from './sql.js';

/** `byIds` takes an array of ids as `$1`. */
export function lookup<T extends { id: number }>(statements: {
  byId: string;
  byIds: string;
}): (db: Queryable, id: number) => Promise<T | undefined> {
  const load = (db: Queryable) => async (ids: readonly number[]) => {
    const { rows } = await db.query<T>(
      ids.length === 1 ? prepared(statements.byId, [ids[0]]) : prepared(statements.byIds, [ids]),
    );
    const found = new Map(rows.map((row) => [Number(row.id), row]));
    return ids.map((id) => found.get(id));
  };
  const loaderOf = perDatabase((db) => new DataLoader(load(db), { cache: false, batchScheduleFn: setImmediate }));
  return (db, id) => loaderOf(db).load(id);
}
