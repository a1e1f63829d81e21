/** What the offset and cursor halves of runList share: the public types, and the SQL pieces every list's statement is built from. */
import { join, raw, sql, type SqlFragment } from '../sql.js';

export type PageRequest =
  | { kind: 'offset'; page: number; perPage: number }
  | {
      kind: 'cursor';
      after: number | undefined;
      afterKey: string | undefined;
      before?: number | undefined;
      beforeKey?: string | undefined;
      limit: number;
    };

/** Filtered lists count their matches up to this many (docs/api.md §10). */
export const TOTAL_CAP = 10_000;

/** What a request adds to a list: the select list it asks for, and conditions that narrow it. */
export interface ListOptions {
  /** Select list (constant SQL) replacing ListSource.columns, e.g. for sparse fields. */
  columns?: string;
  /** Constant SQL joined to the table for extra output columns (e.g. the embedded author). */
  join?: string;
  /**
   * Conditions on the listed items only (not on anchors); their total is a
   * capped count. Their statements are planned with their values each time
   * (toQuery's `named`): whether a week or a year is asked for decides between
   * walking the sort index and reading the matches.
   */
  narrow?: SqlFragment[];
  /**
   * Conditions that every narrowed item meets anyway, there only to steer the
   * page's plan (an id bound): the capped count leaves them out, since they
   * can cost more to evaluate than they save it.
   */
  hints?: SqlFragment[];
  /** A full-text search narrowing the list too (before `narrow`). */
  search?: ListSearch;
}

/**
 * The planner cannot tell how many items a search keeps: a word missing from
 * the column's statistics is guessed at about 0.5 % of the rows, whether it is
 * in 40 posts or in 40 000. Its pages are read in ways that stay cheap
 * whatever the real number (offset.ts, cursor.ts), instead of in the plan
 * that guess picks.
 */
export interface ListSearch {
  /** The condition (src/db/views.ts `searchMatches`). */
  matches: SqlFragment;
  /**
   * Whether the planner sees the word. Hidden, the plan does not depend on it:
   * a statement narrowed by the search alone is prepared by name like the
   * others, and runs the generic plan PostgreSQL keeps after a few executions.
   */
  shown: boolean;
  /**
   * For a source with `removals`: whether a count past the cap may be kept
   * as a proof (boolean SQL read in the count's own snapshot), and what to
   * call when a count passed the cap (`kept`: as a proof).
   */
  proof: { ready: SqlFragment; pastCap(kept: boolean): void };
}

/** How a sort column's values travel in `afterKey`. */
export interface SortColumn {
  /** Constant SQL: the column. */
  column: string;
  key: 'id' | 'timestamp' | 'text';
}
export const idColumn: SortColumn = { column: 'id', key: 'id' };
export const timestampColumn = (column: string): SortColumn => ({ column, key: 'timestamp' });
export const textColumn = (column: string): SortColumn => ({ column, key: 'text' });

export interface Sort<F extends string> {
  field: F;
  descending: boolean;
}

export interface ListSource<F extends string, Filter> {
  /** Table (constant SQL) the items come from. */
  table: string;
  /** Table keeping the sort keys of deleted items, if items can be deleted. */
  tombstones?: string;
  /** Select list (constant SQL), columns aliased to the JSON names. Must not use found/parent/total/removed/ready/cursor_key. */
  columns: string;
  /** The allow-list: API sort field → column. Only these constants reach the SQL text. */
  sortColumns: Record<F, SortColumn>;
  /** Conditions that make an item part of this list, ever (checked on rows and tombstones). */
  scope(filter: Filter): SqlFragment[];
  /** Extra conditions for items listed now (e.g. tokens not yet revoked). */
  live?: SqlFragment[];
  /** Scalar SQL giving the number of listed items; NULL when the parent resource does not exist. */
  total(filter: Filter): SqlFragment;
  /** Boolean SQL: does the parent resource exist? (cursor mode; default TRUE) */
  parentExists?(filter: Filter): SqlFragment;
  /**
   * A statement (constant SQL) giving how many times an item has left this source's
   * lists (deleted, or edited in what a list selects by); it never decreases.
   * With it, narrowed totals past the cap are proven instead of counted again
   * ("Proven caps", src/db/pagination/offset.ts).
   */
  removals?: string;
}

/** capped: set on narrowed lists, whose total is counted up to TOTAL_CAP. */
export type OffsetResult<T> = { kind: 'offset'; items: T[]; total: number; capped?: boolean };
export type CursorResult<T> = {
  kind: 'cursor';
  items: T[];
  hasMore: boolean;
  nextCursor: number | null;
  /** The sort key of the nextCursor item as read (sorts other than id). */
  nextKey: string | null;
  prevCursor: number | null;
  /** The sort key of the prevCursor item as read (sorts other than id). */
  prevKey: string | null;
};
/** null: the parent resource does not exist. */
export type ListResult<T> = OffsetResult<T> | CursorResult<T> | null;

/** The SQL pieces of one list request that both modes use. */
export interface ListPlan {
  sortColumn: SortColumn;
  /** The sort column (constant SQL). */
  column: SqlFragment;
  descending: boolean;
  /** ORDER BY the sort column (and id, as a tie-break) in that direction. */
  order(descending: boolean): SqlFragment;
  /** A match as far as sorting goes: its id and sort key. */
  keyColumns: SqlFragment;
  scope: SqlFragment[];
  /** Scope and live conditions: the list itself, without narrowing. */
  listed: SqlFragment[];
  narrow: SqlFragment[];
  hints: SqlFragment[];
  /** Narrowed by a search (ListSearch). */
  unsure: boolean;
  /** Whether the statement is prepared by name (toQuery). */
  named: boolean;
  /** The list, narrowed. */
  conditions: SqlFragment;
  /** The same, with the hints that steer a page's plan. */
  pageConditions: SqlFragment;
  from: SqlFragment;
  joined: SqlFragment;
  columns: SqlFragment;
  parent: SqlFragment;
}

export function planList<F extends string, Filter>(
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  options: ListOptions,
): ListPlan {
  const sortColumn = source.sortColumns[sort.field];
  const column = raw(sortColumn.column);
  const order = (descending: boolean) => {
    const dir = raw(descending ? 'DESC' : 'ASC');
    return sort.field === 'id' ? sql`ORDER BY id ${dir}` : sql`ORDER BY ${column} ${dir}, id ${dir}`;
  };
  const scope = source.scope(filter);
  const { search } = options;
  const narrow = search ? [search.matches, ...(options.narrow ?? [])] : (options.narrow ?? []);
  const listed = [...scope, ...(source.live ?? [])];
  const conditions = where([...listed, ...narrow]);
  return {
    sortColumn,
    column,
    descending: sort.descending,
    order,
    keyColumns: raw(sortColumn.key === 'id' ? 'id' : `id, ${sortColumn.column}`),
    scope,
    listed,
    narrow,
    hints: options.hints ?? [],
    unsure: search !== undefined,
    // A hidden word gives every search the same plan; a range's bounds decide theirs (a week or a year).
    named: narrow.length === 0 || (search !== undefined && !search.shown && narrow.length === 1),
    conditions,
    pageConditions: options.hints?.length ? where([...listed, ...narrow, ...options.hints]) : conditions,
    from: raw(source.table),
    joined: raw(options.join ? `${source.table} ${options.join}` : source.table),
    columns: raw(options.columns ?? source.columns),
    parent: source.parentExists ? source.parentExists(filter) : raw('TRUE'),
  };
}

/**
 * A page size, written into the SQL text rather than bound. PostgreSQL plans
 * a bound LIMIT for "10 % of the rows", so a list statement never got a
 * reusable generic plan and was planned again on every request (about half of
 * a cursor page's database time); with the size in the text, a page size gets
 * its own prepared statement and plan. Only integers of the validated range
 * (1–100, plus the look-ahead row) can get here.
 */
export function pageSize(n: number): SqlFragment {
  if (!Number.isInteger(n) || n < 1 || n > 101) throw new Error(`page size out of range: ${n}`);
  return raw(String(n));
}

export function where(parts: SqlFragment[]): SqlFragment {
  return parts.length ? join(parts, ' AND ') : raw('TRUE');
}

/** An item without the statement's bookkeeping columns. */
export function strip<T>(row: Record<string, unknown>): T {
  const { total: _t, removed: _r, ready: _y, found: _f, parent: _p, cursor_key: _k, ...item } = row;
  return item as T;
}
