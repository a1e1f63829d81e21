/**
 * The SQL of richer reads (docs/api.md §10), shared by the repositories:
 * select lists cut to the fields a client asked for, the embedded author,
 * creation-time ranges and full-text search. Like sort columns, every
 * identifier comes from a constant allow-list keyed by a schema's enum.
 */
import { sql, type SqlFragment } from './sql.js';

/** A resource's read fields: JSON name → SQL expression aliased to it (constant SQL). */
export type Columns<F extends string> = Record<F | 'id', string>;

/** What a read renders: all fields or some (id always), with the author embedded or not. */
export interface View<F extends string> {
  fields?: readonly F[] | undefined;
  author?: boolean | undefined;
}

export const isFull = (view: View<string>) => view.fields === undefined && !view.author;

/** The select list of a view (constant SQL): `id` first, the asked fields, then the author when embedded. */
export function selectList<F extends string>(columns: Columns<F>, view: View<F> = {}): string {
  const names = view.fields ? ['id' as const, ...view.fields.filter((f) => f !== 'id')] : (Object.keys(columns) as F[]);
  const list = names.map((name) => columns[name]);
  if (view.author) list.push('a.author');
  return list.join(', ');
}

/**
 * Joins the author of each row of `table` (its `author_id`) as `a.author`,
 * `{ id, name }`: a nested-loop join on users' primary key inside the page's
 * one statement, evaluated for the rows the page returns only. Users are
 * never deleted, so every row has one.
 */
export const authorJoin = (table: string) =>
  `LEFT JOIN LATERAL (SELECT json_build_object('id', u.id, 'name', u.name) AS author FROM users u WHERE u.id = ${table}.author_id) a ON TRUE`;

export interface CreatedRange {
  createdAfter?: string | undefined;
  createdBefore?: string | undefined;
}

/**
 * Both bounds exclusive, compared with created_at as the API shows it:
 * truncated to milliseconds. For a shown time X (a whole millisecond),
 * X > a ⇔ created_at ≥ trunc_ms(a) + 1 ms and X < b ⇔ created_at < ceil_ms(b),
 * so the conditions stay on the bare column, which the (…, created_at, id)
 * indexes serve. Bounds arrive with at most microseconds (src/http/view-params.ts),
 * which PostgreSQL keeps exactly.
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
 * `q` in web-search syntax against posts.search, the stored tsvector that
 * posts_search_idx (GIN) indexes; posts_search is `simple` behind `unaccent`
 * (see its migration). A query with no words (only punctuation) matches nothing.
 *
 * The query is a sub-select (an InitPlan, computed once per statement), so the
 * planner never sees the word: it guesses the same share of matches for every
 * search, and the plan it makes is the same whatever the word. A statement
 * narrowed by a search alone can then keep PostgreSQL's generic plan
 * (ListSearch.shown, src/db/pagination/common.ts) instead of being planned on every request, which
 * was two thirds of a rare word's database time (0.33 ms planning, 0.23 ms
 * running, EXPLAIN ANALYZE on a million posts). The plan that guess gives is
 * the one the list statements are built to make cheap for any word (a bitmap
 * of the GIN index for the capped count, a walk of the sort index for a page
 * past the cap: src/db/pagination/). Seeing the word helps one statement
 * only, a common word's count: the planner then counts its first 11 001
 * matches by a walk (about 17 ms of CPU under pgbench) instead of a bitmap of
 * all of them (about 100 ms). So a word this instance has counted past the cap
 * (src/db/search-proofs.ts `isCommonSearch`) is `shown`, and its statements
 * are planned with it: only the first count of a common word on an instance
 * reads the bitmap.
 */
export const searchMatches = (q: string, shown = false) =>
  shown
    ? sql`search @@ websearch_to_tsquery('posts_search', ${q})`
    : sql`search @@ (SELECT websearch_to_tsquery('posts_search', ${q}))`;

/** A view's FROM (constant SQL): the table, joined to its authors when they are embedded. */
export const viewSource = (table: string, view: View<string>) =>
  view.author ? `${table} ${authorJoin(table)}` : table;

/** ListOptions for a view: none for the full one (the list's own select list), else its select list and join. */
export function listView<F extends string>(
  columns: Columns<F>,
  table: string,
  view: View<F>,
): { columns?: string; join?: string } {
  if (isFull(view)) return {};
  return { columns: selectList(columns, view), ...(view.author ? { join: authorJoin(table) } : {}) };
}

/** An item as a view renders it. */
export type Viewed<T extends { id: number }> = Pick<T, 'id'> & Partial<T> & { author?: { id: number; name: string } };
