/** What the schema says of itself, read from PostgreSQL's catalog. */
import type { Queryable } from '../db/pool.js';

/** The table a foreign key of `table` references, named as the catalog names it; undefined when there is none. */
export async function referencedTable(db: Queryable, table: string, constraint: string): Promise<string | undefined> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT confrelid::regclass::text AS name FROM pg_constraint
     WHERE contype = 'f' AND conname = $1 AND conrelid = to_regclass($2)`,
    [constraint, table],
  );
  return rows[0]?.name;
}
