/** The SQL of richer reads (docs/api.md §10); identifiers only from constant allow-lists. */
import { sql, type SqlFragment } from './sql.js';

export type Columns<F extends string> = Record<F | 'id', string>;

export interface View<F extends string> {
  fields?: readonly F[] | undefined;
  author?: boolean | undefined;
}

export const isFull = (view: View<string>) => view.fields === undefined && !view.author;

export function selectList<F extends string>(columns: Columns<F>, view: View<F> = {}): string {
  const names = view.fields ? ['id' as const, ...view.fields.filter((f) => f !== 'id')] : (Object.keys(columns) as F[]);
  const list = names.map((name) => columns[name]);
  if (view.author) list.push('a.author');
  return list.join(', ');
}

/** Evaluated for the returned rows only. Users are never deleted, so every row has one. */
export const authorJoin = (table: string) =>
  `LEFT JOIN LATERAL (SELECT json_build_object('id', u.id, 'name', u.name) AS author FROM users u WHERE u.id = ${table}.author_id) a ON TRUE`;

export interface CreatedRange {
  createdAfter?: string | undefined;
  createdBefore?: string | undefined;
}

/**
 * Exclusive bounds against created_at as shown (milliseconds), written on the
 * bare column so the (…, created_at, id) indexes serve them.
 */
export function createdBetween({ createdAfter, createdBefore }: CreatedRange): SqlFragment[] {
  const conditions: SqlFragment[] = [];
  if (createdAfter !== undefined) {
    conditions.push(
      sql`created_at >= date_trunc('milliseconds', ${createdAfter}::timestamptz) + interval '1 millisecond'`,
    );
  }
  if (createdBefore !== undefined) {
    conditions.push(
      sql`created_at < date_trunc('milliseconds', ${createdBefore}::timestamptz - interval '1 microsecond') + interval '1 millisecond'`,
    );
  }
  return conditions;
}

/**
 * Hidden (a sub-select), the word does not reach the planner, so the statement
 * keeps one generic plan; a word known to be common is shown, which makes its
 * count cheaper (docs/architecture.md, "Lists").
 */
export const searchMatches = (q: string, shown = false) =>
  shown
    ? sql`search @@ websearch_to_tsquery('posts_search', ${q})`
    : sql`search @@ (SELECT websearch_to_tsquery('posts_search', ${q}))`;

export const viewSource = (table: string, view: View<string>) =>
  view.author ? `${table} ${authorJoin(table)}` : table;

export function listView<F extends string>(
  columns: Columns<F>,
  table: string,
  view: View<F>,
): { columns?: string; join?: string } {
  if (isFull(view)) return {};
  return { columns: selectList(columns, view), ...(view.author ? { join: authorJoin(table) } : {}) };
}

export type Viewed<T extends { id: number }> = Pick<T, 'id'> & Partial<T> & { author?: { id: number; name: string } };
