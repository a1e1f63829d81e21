/** State kept per database handle. */
import type { Queryable } from './pool.js';

/**
 * `make`'s value for a database handle (the pool, a replica's reader, a transaction's client), made on its first use
 * and the same ever after. What batches, caches or queues work for one database must never serve another: a lookup
 * batched on a replica would read the primary's rows, a transaction's write would share a statement outside it. A
 * WeakMap holds the values, so a handle nothing refers to any more (an ended pool) takes its value with it.
 */
export function perDatabase<V>(make: (db: Queryable) => V): (db: Queryable) => V {
  const made = new WeakMap<Queryable, V>();
  return (db) => {
    if (made.has(db)) return made.get(db) as V;
    const value = make(db);
    made.set(db, value);
    return value;
  };
}
