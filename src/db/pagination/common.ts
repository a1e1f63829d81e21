/** The types and SQL pieces shared by offset and cursor lists (docs/architecture.md, "Lists"). */
import { join, raw, sql, type SqlFragment } from '../sql.js';

/** A cursor page's anchors: after (afterKey) or before (beforeKey) an item, or neither. */
type Anchors = Partial<Record<'after' | 'before', number> & Record<'afterKey' | 'beforeKey', string>>;
export type PageRequest =
  | { kind: 'offset'; page: number; perPage: number; snapshot?: Snapshot | undefined }
  | ({ kind: 'cursor'; limit: number } & Anchors);

/**
 * The moment an offset page is computed as of (docs/api.md §5, `snapshot`; attach_snapshots in the migrations):
 * what a page without one saw, handed out in its links.
 */
export interface SnapshotPoint {
  /** The statement's pg_current_snapshot(), as text. */
  xids: string;
  /** The largest id of the table that statement saw (0: none). */
  top: number;
}

/** A snapshot as a later page reads it: the point, and the list's total then. */
export interface Snapshot extends SnapshotPoint {
  total: number;
  estimated: boolean;
}

/** Narrowed lists count exactly up to this many, past it the planner estimates (docs/api.md §10). */
export const EXACT_TOTAL_UP_TO = 10_000;

/**
 * Pages that skip fewer items walk them (OFFSET on the sort's index); deeper ones start where the ranks say. The
 * ranks cost about 0.85 ms of PostgreSQL time at any depth, a walk as much at 6 000–8 000 items: at page 20 of an
 * author the ranks cost 3.3 times the walk (bench/RESULTS.md, issue 47).
 */
export const RANKED_FROM_OFFSET: number = 8_000;

export interface ListOptions {
  /** Constant SQL: sparse fields, the embedded author's join. */
  columns?: string;
  join?: string;
  /** On the listed items only, not on anchors; counted, or estimated past the threshold. */
  narrow?: SqlFragment[];
  /**
   * Narrowing with an index of its own that ids grow with (a created_at range), which the planner
   * does not know: sorted by id, a page starts at the range's least (or greatest) id, read from that
   * index, instead of walking the primary key from its end.
   */
  boundedBy?: SqlFragment[];
  /** A full-text search: its pages are read in ways that do not trust the planner's estimate. */
  search?: {
    matches: SqlFragment;
    /** Whether the planner sees the word (hidden: one generic plan); `planned` shows it, for the estimate. */
    shown: boolean;
    planned: SqlFragment;
    pastThreshold(): void;
  };
}

export interface SortColumn {
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
  table: string;
  tombstones?: string;
  /** Not the bookkeeping names `strip` removes. */
  columns: string;
  /** The allow-list: only these constants reach the SQL text. */
  sortColumns: Record<F, SortColumn>;
  /** What makes an item part of this list, ever (rows and tombstones); `live`: listed now. */
  scope(filter: Filter): SqlFragment[];
  live?: SqlFragment[];
  /** NULL when the parent resource does not exist. */
  total(filter: Filter): SqlFragment;
  parentExists?(filter: Filter): SqlFragment;
  /**
   * Kept counts that find where a deep offset page starts (a function such as post_page_start), for sorts on
   * keys that never change, when the list is not narrowed; `scope`: its list's number there.
   */
  ranks?: { start: string; sorts: readonly F[]; scope(filter: Filter): SqlFragment };
  /**
   * Its inserts commit in the order of their ids (attach_snapshots' `in_id_order`): a page as of a snapshot keeps
   * the rows up to the largest id the snapshot saw, from an index. Otherwise it checks each row's created_xid.
   */
  inIdOrder?: true;
}

/** A total the triggers keep in `counters` (0 before its row exists). */
export const counter = (name: 'posts' | 'users'): string =>
  `SELECT COALESCE((SELECT n FROM counters WHERE name = '${name}'), 0)`;

/** `made`: the point a page requested without a snapshot was read at, for its links. */
export type OffsetResult<T> = {
  kind: 'offset';
  items: T[];
  total: number;
  estimated?: boolean;
  made?: SnapshotPoint;
};
/** The next and previous pages' anchors: an item's id and, for sorts other than id, its key; null where none. */
type Neighbours = Record<'nextCursor' | 'prevCursor', number | null> & Record<'nextKey' | 'prevKey', string | null>;
export type CursorResult<T> = { kind: 'cursor'; items: T[]; hasMore: boolean } & Neighbours;
/** null: the parent resource does not exist. */
export type ListResult<T> = OffsetResult<T> | CursorResult<T> | null;

/** A list's SQL pieces for one sort and filter, which offset and cursor pages put together. */
export interface ListPlan {
  sortColumn: SortColumn;
  column: SqlFragment;
  descending: boolean;
  /** Sorted by something other than id: a cursor carries the item's key too. */
  keyed: boolean;
  order(descending: boolean): SqlFragment;
  keyColumns: SqlFragment;
  scope: SqlFragment[];
  /** Scope and live conditions: the list itself, without narrowing. */
  listed: SqlFragment[];
  narrow: SqlFragment[];
  /** Narrowed by a search: its pages do not trust the planner's estimate. */
  unsure: boolean;
  /**
   * A search for a word once counted past the threshold: its offset pages ask the planner first, and count only
   * when the estimate is below the threshold (docs/api.md §10).
   */
  common: boolean;
  /** Met by every narrowed item anyway: they steer the page's plan and stay out of the count. */
  hints: SqlFragment[];
  /** An offset page counts its items and finds its bound in one walk of the range's index instead. */
  bound: { agg: SqlFragment; cmp: SqlFragment } | undefined;
  /** A prepared (named) statement: one generic plan serves every value. */
  named: boolean;
  conditions: SqlFragment;
  total: SqlFragment;
  pastThreshold(): void;
  pageConditions: SqlFragment;
  /** The conditions as the planner's estimate should see them (the words shown). */
  planned: SqlFragment;
  from: SqlFragment;
  /** An offset page as of this moment (its total is the snapshot's). */
  snapshot: Snapshot | undefined;
  inIdOrder: boolean;
  /** The ranks' start function call's arguments but the offset, when this list and sort have them. */
  ranked: { start: SqlFragment; scope: SqlFragment; byKey: boolean } | undefined;
  tombstones: SqlFragment | undefined;
  joined: SqlFragment;
  columns: SqlFragment;
  /** TRUE where the list has no parent resource. */
  parent: SqlFragment;
}

export function planList<F extends string, Filter>(
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  options: ListOptions,
  snapshot?: Snapshot,
): ListPlan {
  const sortColumn: SortColumn = source.sortColumns[sort.field];
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
  const bounded = sort.field === 'id' && options.boundedBy?.length ? where(options.boundedBy) : undefined;
  const bound = bounded && { agg: raw(sort.descending ? 'max' : 'min'), cmp: raw(sort.descending ? '<=' : '>=') };
  // OFFSET 0 keeps min/max from being planned as a walk of the primary key, the very thing to avoid.
  const ids = bounded && sql`(SELECT id FROM ${raw(source.table)} WHERE ${bounded} OFFSET 0) r`;
  const hints = bound ? [sql`id ${bound.cmp} (SELECT ${bound.agg}(id) FROM ${ids})`] : [];
  return {
    sortColumn,
    column,
    descending: sort.descending,
    keyed: sortColumn.key !== 'id',
    order,
    keyColumns: raw(sortColumn.key === 'id' ? 'id' : `id, ${sortColumn.column}`),
    scope,
    listed,
    narrow,
    unsure: search !== undefined,
    common: search?.shown === true,
    hints,
    bound,
    // A hidden word gives every search the same plan; a range's bounds decide theirs (a week or a year).
    named: narrow.length === 0 || (search !== undefined && !search.shown && narrow.length === 1),
    conditions,
    total: source.total(filter),
    pastThreshold: () => search?.pastThreshold(),
    pageConditions: hints.length ? where([...listed, ...narrow, ...hints]) : conditions,
    planned: search ? where([...listed, search.planned, ...(options.narrow ?? [])]) : conditions,
    from: raw(source.table),
    snapshot,
    inIdOrder: source.inIdOrder === true,
    ranked: rankedBy(source, filter, sort, narrow),
    tombstones: source.tombstones ? raw(source.tombstones) : undefined,
    joined: raw(options.join ? `${source.table} ${options.join}` : source.table),
    columns: raw(options.columns ?? source.columns),
    parent: source.parentExists ? source.parentExists(filter) : raw('TRUE'),
  };
}

/** A list not narrowed, sorted on a key its ranks count (id or created_at). */
function rankedBy<F extends string, Filter>(
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  narrow: SqlFragment[],
): ListPlan['ranked'] {
  const { ranks } = source;
  if (!ranks || narrow.length > 0 || !ranks.sorts.includes(sort.field)) return undefined;
  return { start: raw(ranks.start), scope: ranks.scope(filter), byKey: source.sortColumns[sort.field].key !== 'id' };
}

/** Written into the SQL text, not bound: a bound LIMIT never gets a reusable generic plan. */
export function pageSize(n: number): SqlFragment {
  if (!Number.isInteger(n) || n < 1 || n > 101) throw new Error(`page size out of range: ${n}`);
  return raw(String(n));
}

export function where(parts: SqlFragment[]): SqlFragment {
  return parts.length ? join(parts, ' AND ') : raw('TRUE');
}

export function strip<T>(row: Record<string, unknown>): T {
  const { total: _t, found: _f, parent: _p, cursor_key: _k, snapshot_xids: _x, snapshot_top: _s, ...item } = row;
  return item as T;
}
