/** The SQL of richer reads (docs/api.md §10); identifiers only from constant allow-lists. */
import type { Queryable } from './pool.js';
import { firstRow, sql, type SqlFragment } from './sql.js';

export type Columns<F extends string> = Record<F | 'id', string>;

export interface View<F extends string> {
  fields?: readonly F[] | undefined;
  author?: boolean | undefined;
}

export const isFull = (view: View<string>): boolean => view.fields === undefined && !view.author;

export function selectList<F extends string>(columns: Columns<F>, view: View<F> = {}): string {
  const names = view.fields ? ['id' as const, ...view.fields.filter((f) => f !== 'id')] : (Object.keys(columns) as F[]);
  const list = names.map((name) => columns[name]);
  if (view.author) list.push('a.author');
  return list.join(', ');
}

/** Evaluated for the returned rows only. Users are never deleted, so every row has one. */
export const authorJoin = (table: string): string =>
  `LEFT JOIN LATERAL (SELECT json_build_object('id', u.id, 'name', u.name) AS author FROM users u WHERE u.id = ${table}.author_id) a ON TRUE`;

export interface CreatedRange {
  createdAfter?: string | undefined;
  createdBefore?: string | undefined;
}

/** Exclusive bounds on created_at as shown (milliseconds), on the bare column so its indexes serve them. */
export const createdBetween = ({ createdAfter, createdBefore }: CreatedRange): SqlFragment[] => [
  ...(createdAfter === undefined
    ? []
    : [sql`created_at >= date_trunc('milliseconds', ${createdAfter}::timestamptz) + interval '1 millisecond'`]),
  ...(createdBefore === undefined
    ? []
    : [
        sql`created_at < date_trunc('milliseconds', ${createdBefore}::timestamptz - interval '1 microsecond') + interval '1 millisecond'`,
      ]),
];

/** Hidden (a sub-select), the word keeps one generic plan; a word known to be common is shown, for a cheaper count. */
export const searchMatches = (q: string, shown = false): SqlFragment =>
  shown
    ? sql`search @@ websearch_to_tsquery('posts_search', ${q})`
    : sql`search @@ (SELECT websearch_to_tsquery('posts_search', ${q}))`;

export function readView<T extends { id: number }, F extends string>(
  db: Queryable,
  columns: Columns<F>,
  table: string,
  view: View<F>,
  where: string,
  values: unknown[],
): Promise<Viewed<T> | undefined> {
  const from = view.author ? `${table} ${authorJoin(table)}` : table;
  return firstRow<Viewed<T>>(db, `SELECT ${selectList(columns, view)} FROM ${from} WHERE ${where}`, values);
}

/** A list's select list and the author's join, for its ListOptions; neither for the full view. */
export interface ListColumns {
  columns?: string;
  join?: string;
}

export function listView<F extends string>(columns: Columns<F>, table: string, view: View<F>): ListColumns {
  if (isFull(view)) return {};
  return { columns: selectList(columns, view), ...(view.author ? { join: authorJoin(table) } : {}) };
}

export type Viewed<T extends { id: number }> = Pick<T, 'id'> & Partial<T> & { author?: { id: number; name: string } };
