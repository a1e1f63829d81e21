/**
 * Lists in SQL, one round trip each (docs/api.md §5).
 *
 * Offset mode: LIMIT/OFFSET, with the total read from a counter the database
 * keeps (ListSource.total), never a COUNT(*) over a big table.
 *
 * Cursor mode: a row-value keyset `(sort_col, id) > (anchor)` in the requested
 * direction, fetching limit + 1 rows to know whether more follow.
 *
 * Where the walk resumes. `after` is an id, as the contract says. Sorted by id,
 * the id is the position: the page starts right after it, and the id is only
 * checked to have named an item (live, or deleted: tombstones keep the sort
 * keys of deleted rows), else 422. Sorted by anything else, the position is
 * the anchor's sort key, and that key may change (an edit moves an item in
 * `-updatedAt` or `title` order): looked up at request time, a walk whose
 * anchor was edited between two pages would repeat items or skip the rest.
 * So every cursor page also answers with the anchor's key as it was when the
 * page was read, and the `next` Link carries it as `afterKey` (timestamps in
 * UTC with microseconds, `2026-11-22T10:00:00.123456Z`, which is the stored
 * precision; text as is). With `afterKey` the page resumes at exactly
 * (afterKey, after), whatever happened to that item since: a client that
 * follows `next` links never skips an item present throughout, and gets each
 * once, except that an item edited mid-walk to a key ahead of the walk shows up
 * again at its new place (as it would with any keyset cursor). It is not
 * looked up (it is a position, not a claim about an item), which also
 * saves the anchor lookup. Without it (a client building URLs from
 * `nextCursor`) the anchor's current key is used, looked up among live rows,
 * then tombstones, as before. A malformed `afterKey`, one without `after`, or
 * one on a sort by id (where it would mean nothing) is a 422.
 *
 * Paging back. `before` is the mirror image of `after`: the page is the `limit`
 * items that precede the anchor, read with the comparison and the order
 * reversed (same indexes, walked backwards) and turned back into the sort
 * order here; the `prev` Link carries the first item's key as `beforeKey`,
 * with the same rules as `afterKey`. `prevCursor` names the first item of a
 * page when items precede it: on a `before` page when the look-ahead row
 * exists, on an `after` page always (the items already received precede it).
 * Symmetrically, on a `before` page `nextCursor` names its last item (the
 * anchor, at least, follows it) and `hasMore` is true when it has items.
 *
 * Narrowing filters (`q`, date ranges: ListOptions.narrow) select among the
 * items of the list; the anchor is still checked against the list itself, so a
 * walk survives an item edited out of a search. Their totals cannot come from
 * a counter: they are counted, up to TOTAL_CAP + 1 rows (or PROOF_SLACK more,
 * below), and reported capped.
 * Proven caps: counting a common word's or a busy week's matches up to the
 * cap costs thousands of rows on every request, and the answer rarely changes.
 * A source that keeps a removal counter (ListSource.removals: it grows by one
 * whenever an item leaves a list, deleted or edited) lets a count that found N
 * matches at removal count R stand for "at least N - (R' - R) match" while the
 * counter reads R' (new items only add matches). The statement reads the
 * counter in its own snapshot and counts only when that bound is not past the
 * cap (and, for a search, only once the search is settled: src/db/search-proofs.ts);
 * the instance keeps the newest (N, R) per database and narrowed list, and
 * counts PROOF_SLACK further than the cap so that one proof outlives that many
 * removals. On a replica the bound is as fresh as the replica's data.
 *
 * A search is also a narrowing whose selectivity the planner can only guess
 * (ListOptions.unsure): its pages come from the matches themselves when they
 * are few (fewer than TOTAL_CAP, or a walk of WALK_LIMIT items finds less than
 * a page), and from a walk of the sort index otherwise.
 */
import { join, raw, sql, toQuery, type SqlFragment } from './sql.js';
import { perDatabase, type Queryable } from './pool.js';
import { validation } from '../errors.js';

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

/**
 * A narrowed cursor page walks the sort index for at most this many items
 * before reading the matches instead (runList): enough for a condition that
 * matches one item in 100 to fill a page of 20 by walking.
 */
export const WALK_LIMIT = 2_000;

/** How far past the cap a count goes where a proof can be kept: a proof then survives this many removals. */
export const PROOF_SLACK = 1_000;
const MAX_PROOFS = 1_000;
/** Per database (a pool, a replica): narrowed list (source and conditions) → the newest count past the cap and the removal count it was made at. */
const proofsFor = perDatabase<{ count: number; removed: number }>(MAX_PROOFS);
type Proofs = ReturnType<typeof proofsFor>;

/** What a request adds to a list: the select list it asks for, and conditions that narrow it. */
export interface ListOptions {
  /** Select list (constant SQL) replacing ListSource.columns, e.g. for sparse fields. */
  columns?: string;
  /** Constant SQL joined to the table for extra output columns (e.g. the embedded author). */
  join?: string;
  /**
   * Conditions on the listed items only (not on anchors); their total is a
   * capped count. Their statements are planned with their values each time
   * (toQuery's `named`), unless `reusablePlan`: whether a week or a year is
   * asked for decides between walking the sort index and reading the matches.
   */
  narrow?: SqlFragment[];
  /**
   * Conditions that every narrowed item meets anyway, there only to steer the
   * page's plan (an id bound): the capped count leaves them out, since they
   * can cost more to evaluate than they save it.
   */
  hints?: SqlFragment[];
  /**
   * The planner cannot tell how many items `narrow` keeps: a full-text search,
   * where a word missing from the column's statistics is guessed at about
   * 0.5 % of the rows, whether it is in 40 posts or in 40 000. Pages are then
   * read in ways that stay cheap whatever the real number (runList), instead
   * of in the plan that guess picks.
   */
  unsure?: boolean;
  /**
   * The narrowing's plan does not depend on its values, because the planner
   * does not see them (a search: src/db/views.ts `searchMatches`): its
   * statements are prepared by name like the others, and run the generic plan
   * PostgreSQL keeps after a few executions, instead of being planned with the
   * values on every request as `narrow` otherwise is.
   */
  reusablePlan?: boolean;
  /**
   * For a source with `removals`: whether a count past the cap may be kept
   * as a proof (boolean SQL read in the count's own snapshot; by default it
   * may), and what to call when a count passed the cap (`kept`: as a proof).
   */
  proof?: { ready: SqlFragment; pastCap(kept: boolean): void };
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
   * ("Proven caps" above).
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

/**
 * A page size, written into the SQL text rather than bound. PostgreSQL plans
 * a bound LIMIT for "10 % of the rows", so a list statement never got a
 * reusable generic plan and was planned again on every request (about half of
 * a cursor page's database time); with the size in the text, a page size gets
 * its own prepared statement and plan. Only integers of the validated range
 * (1–100, plus the look-ahead row) can get here.
 */
function pageSize(n: number): SqlFragment {
  if (!Number.isInteger(n) || n < 1 || n > 101) throw new Error(`page size out of range: ${n}`);
  return raw(String(n));
}

function where(parts: SqlFragment[]): SqlFragment {
  return parts.length ? join(parts, ' AND ') : raw('TRUE');
}

export async function runList<T extends { id: number }, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  page: PageRequest,
  options: ListOptions = {},
): Promise<ListResult<T>> {
  const sortColumn = source.sortColumns[sort.field];
  const column = raw(sortColumn.column);
  const order = (descending: boolean) => {
    const dir = raw(descending ? 'DESC' : 'ASC');
    return sort.field === 'id' ? sql`ORDER BY id ${dir}` : sql`ORDER BY ${column} ${dir}, id ${dir}`;
  };
  const orderBy = order(sort.descending);
  // A match as far as sorting goes: its id and sort key.
  const keyColumns = raw(sortColumn.key === 'id' ? 'id' : `id, ${sortColumn.column}`);
  const scope = source.scope(filter);
  const narrow = options.narrow ?? [];
  const unsure = narrow.length > 0 && options.unsure === true;
  const named = narrow.length === 0 || options.reusablePlan === true;
  const listed = [...scope, ...(source.live ?? [])];
  const conditions = where([...listed, ...narrow]);
  const pageConditions = options.hints?.length ? where([...listed, ...narrow, ...options.hints]) : conditions;
  const from = raw(source.table);
  const joined = raw(options.join ? `${source.table} ${options.join}` : source.table);
  const columns = raw(options.columns ?? source.columns);
  const parent = source.parentExists ? source.parentExists(filter) : raw('TRUE');

  if (page.kind === 'offset') {
    const offset = (page.page - 1) * page.perPage;
    // A narrowed total past the cap may be proven rather than counted ("Proven
    // caps" above). Where a proof can be kept, the count goes PROOF_SLACK past
    // the cap, and reads the removal counter in the same snapshot.
    const provable = narrow.length > 0 && source.removals !== undefined;
    const proofs = provable ? proofsFor(db) : undefined;
    const proofKey = provable ? keyOf(source.table, conditions) : '';
    const proof = proofs?.peek(proofKey);
    const cap = raw(String(TOTAL_CAP));
    const limit = raw(String(TOTAL_CAP + 1 + (provable ? PROOF_SLACK : 0)));
    // The lateral reference to h forces a nested loop with h outside, which keeps
    // the inner ORDER BY and skips the item scan entirely when the parent is missing.
    // OFFSET 0 keeps h a subquery evaluated once, instead of its expression being
    // copied into (and run again by) the lateral part.
    // Past the first page the skipped rows are walked on the sort index alone (ids
    // only, an index-only scan) and just the page's rows are read and rendered:
    // selecting all columns would fetch and format every skipped row.
    // An unsure narrowing walks the sort index only when more than TOTAL_CAP match
    // (below), as does a proven one, whose statement stops there when the proof no longer holds.
    const walked = unsure || proof ? sql`> ${cap}` : raw('IS NOT NULL');
    const items =
      offset === 0
        ? sql`SELECT ${columns} FROM ${joined} WHERE h.total ${walked} AND ${pageConditions}
            ${orderBy} LIMIT ${pageSize(page.perPage)}`
        : sql`SELECT ${columns} FROM ${joined} WHERE id IN (
              SELECT id FROM ${from} WHERE h.total ${walked} AND ${pageConditions}
              ${orderBy} LIMIT ${pageSize(page.perPage)} OFFSET ${offset}
            ) ${orderBy}`;
    // The head of a narrowed page: its total (counted, or proven) and, where a proof can be kept,
    // the removal count in the same snapshot, and whether this count may stand as a proof.
    const narrowed = (total: SqlFragment) =>
      provable
        ? sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total, removed, (${proof ? raw('TRUE') : (options.proof?.ready ?? raw('TRUE'))}) AS ready
            FROM (SELECT (${raw(source.removals!)})::int8 AS removed OFFSET 0) p OFFSET 0) h`
        : sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total OFFSET 0) h`;
    let query: SqlFragment;
    if (proof) {
      query = sql`SELECT h.*, r.* FROM ${narrowed(sql`${proof.count}::int8 - (removed - ${proof.removed}::int8)`)}
        LEFT JOIN LATERAL (${items}) r ON TRUE`;
    } else if (unsure) {
      // The matches are read once, up to the count's limit, as (id, sort key)
      // pairs (MATERIALIZED: one scan serves both uses), and counted. Up to
      // TOTAL_CAP of them, the page is sorted out of those pairs. Walking the
      // sort index instead is what the planner picks for a word it wrongly
      // thinks common, and it reads nearly every post to find a rare word's
      // few. Past TOTAL_CAP the matches are at least that common, and the page
      // walks the sort index, stopping after a page of them. h.total picks the
      // branch as a one-time filter on each side of the UNION ALL: only one of
      // them runs.
      // No OFFSET on a first page: a bound one is planned as "some rows" in a
      // generic plan, which then costs more than a custom one and is never
      // chosen (ListOptions.reusablePlan).
      const skip = offset === 0 ? sql`` : sql` OFFSET ${offset}`;
      const sorted = sql`SELECT ${columns} FROM ${joined} WHERE h.total <= ${cap} AND id IN (
          SELECT id FROM matches ${orderBy} LIMIT ${pageSize(page.perPage)}${skip}
        ) ${orderBy}`;
      query = sql`WITH matches AS MATERIALIZED (SELECT ${keyColumns} FROM ${from} WHERE ${conditions} LIMIT ${limit})
        SELECT h.*, r.* FROM ${narrowed(sql`SELECT count(*) FROM matches`)}
        LEFT JOIN LATERAL ((${sorted}) UNION ALL (${items})) r ON TRUE`;
    } else {
      // A narrowed list has no counter: its matches are counted, up to the limit,
      // which an index on the narrowing condition bounds.
      const head = narrow.length
        ? narrowed(sql`SELECT count(*) FROM (SELECT 1 FROM ${from} WHERE ${conditions} LIMIT ${limit}) m`)
        : sql`(SELECT (${source.total(filter)})::int8 AS total OFFSET 0) h`;
      query = sql`SELECT h.*, r.* FROM ${head} LEFT JOIN LATERAL (${items}) r ON TRUE`;
    }
    const { rows } = await db.query(toQuery(query, named));
    const head = rows[0] as { total: number | null; removed?: number; ready?: boolean } | undefined;
    if (!head || head.total === null) return null;
    if (proofs) {
      if (head.ready) remember(proofs, proofKey, head.total, Number(head.removed));
      if (!proof && head.total > TOTAL_CAP) options.proof?.pastCap(head.ready === true);
      // Too many removals since the proof: count (the proof is forgotten).
      if (proof && head.total <= TOTAL_CAP) return runList(db, source, filter, sort, page, options);
    }
    const found = (rows[0] as T).id === null ? [] : rows.map(strip<T>);
    if (!narrow.length) return { kind: 'offset', total: head.total, items: found };
    return { kind: 'offset', total: Math.min(head.total, TOTAL_CAP), capped: head.total > TOTAL_CAP, items: found };
  }

  // Walking back from `before` is walking forward in the opposite order.
  const backward = page.before !== undefined;
  const [idName, keyName] = backward ? (['before', 'beforeKey'] as const) : (['after', 'afterKey'] as const);
  const anchorId = backward ? page.before : page.after;
  const anchorKey = backward ? page.beforeKey : page.afterKey;
  if (!backward && page.beforeKey !== undefined) throw validation({ beforeKey: ['needs before'] });
  const cmp = raw(sort.descending !== backward ? '<' : '>');
  const keyed = sortColumn.key !== 'id';
  let anchor = sql``;
  let found = raw('TRUE');
  let after = raw('TRUE');
  if (anchorKey !== undefined) {
    if (!keyed) throw validation({ [keyName]: ['applies only to sorts other than id'] });
    if (anchorId === undefined) throw validation({ [keyName]: [`needs ${idName}`] });
    after = sql`(${column}, id) ${cmp} (${parseKey(sortColumn.key, anchorKey, keyName)}, ${anchorId}::int8)`;
  } else if (anchorId !== undefined) {
    const anchorWhere = where([sql`id = ${anchorId}`, ...scope]);
    const tomb = source.tombstones ? raw(source.tombstones) : undefined;
    if (!keyed) {
      after = sql`id ${cmp} ${anchorId}::int8`;
      found = tomb
        ? sql`(EXISTS (SELECT 1 FROM ${from} WHERE ${anchorWhere}) OR EXISTS (SELECT 1 FROM ${tomb} WHERE ${anchorWhere}))`
        : sql`EXISTS (SELECT 1 FROM ${from} WHERE ${anchorWhere})`;
    } else {
      const tombRows = tomb ? sql` UNION ALL SELECT ${column} AS k, id FROM ${tomb} WHERE ${anchorWhere}` : sql``;
      anchor = sql`WITH anchor AS (SELECT ${column} AS k, id FROM ${from} WHERE ${anchorWhere}${tombRows} LIMIT 1) `;
      found = raw('EXISTS (SELECT 1 FROM anchor)');
      after = sql`(${column}, id) ${cmp} (SELECT k, id FROM anchor)`;
    }
  }
  const key = keyed ? sql`, ${keyText(sortColumn)} AS cursor_key` : sql``;
  const pageOrder = order(sort.descending !== backward);
  const size = pageSize(page.limit + 1);
  let rowsRead = sql`SELECT ${columns}${key} FROM ${joined} WHERE h.found AND h.parent AND ${pageConditions} AND ${after}
    ${pageOrder} LIMIT ${size}`;
  if (unsure) {
    // A cursor page has no count to tell a rare word from a common one, so it
    // tries the cheap way first: walk the sort index for at most WALK_LIMIT
    // listed items after the anchor, keeping those that match (a common word
    // fills the page in a few dozen). The walk's WALK_LIMIT-th item is kept
    // too, as a marker: it is read only when the walk went that far. If it did
    // and found no more than `limit` matches, the page is read from the
    // matches instead: all of them, planned on their own (OFFSET 0 fences them:
    // a bitmap of the GIN index for a word), then those after the anchor,
    // sorted. The anchor's condition stays outside the fence: planned without
    // the anchor's key, the planner guesses it keeps a third of the table and
    // ANDs the GIN bitmap with a bitmap of the sort index over that range,
    // which reads up to the whole index to save nothing. Either way the page
    // is the first limit + 1 matches after the anchor (the walk's matches are
    // the first ones, since it walks in order): where the walk stops decides
    // the cost only, never the items.
    const walkLimit = raw(String(WALK_LIMIT));
    const walkConditions = where([...listed, ...(options.hints ?? []), after]);
    const ids = sql`WITH walk AS (
          SELECT id, hit, row_number() OVER () AS n FROM (
            SELECT id, (${where(narrow)}) AS hit FROM ${from} WHERE h.found AND h.parent AND ${walkConditions}
            ${pageOrder} LIMIT ${walkLimit}
          ) w
        ),
        walked AS MATERIALIZED (SELECT id, hit, n FROM walk WHERE hit OR n = ${walkLimit} LIMIT ${size}),
        short AS (SELECT count(*) FILTER (WHERE hit) < ${size} AND count(*) FILTER (WHERE n = ${walkLimit}) > 0 AS yes FROM walked)
        SELECT id FROM walked WHERE hit AND NOT (SELECT yes FROM short)
        UNION ALL
        (SELECT id FROM (SELECT ${keyColumns} FROM ${from} WHERE ${conditions} OFFSET 0) m
          WHERE (SELECT yes FROM short) AND ${after} ${pageOrder} LIMIT ${size})`;
    rowsRead = sql`SELECT ${columns}${key} FROM ${joined} WHERE id IN (${ids}) ${pageOrder}`;
  }
  const query = sql`${anchor}SELECT h.found, h.parent, r.* FROM (SELECT ${found} AS found, (${parent}) AS parent OFFSET 0) h
    LEFT JOIN LATERAL (${rowsRead}) r ON TRUE`;
  const { rows } = await db.query(toQuery(query, named));
  const head = rows[0] as { found: boolean; parent: boolean | null };
  if (!head.parent) return null;
  if (!head.found) throw validation({ [idName]: ['does not name an item of this list'] });
  const present = (rows[0] as { id: number | null }).id !== null;
  const more = rows.length > page.limit;
  const read = (present ? rows.slice(0, page.limit) : []) as (T & { cursor_key?: string })[];
  if (backward) read.reverse();
  const first = read[0];
  const last = read.at(-1);
  const items = read.map(strip<T>);
  if (backward) {
    return {
      kind: 'cursor',
      items,
      hasMore: last !== undefined,
      nextCursor: last?.id ?? null,
      nextKey: last?.cursor_key ?? null,
      prevCursor: more ? first!.id : null,
      prevKey: more ? (first!.cursor_key ?? null) : null,
    };
  }
  const preceded = anchorId !== undefined && first !== undefined;
  return {
    kind: 'cursor',
    items,
    hasMore: more,
    nextCursor: more ? last!.id : null,
    nextKey: more ? (last!.cursor_key ?? null) : null,
    prevCursor: preceded ? first.id : null,
    prevKey: preceded ? (first.cursor_key ?? null) : null,
  };
}

/** The column as afterKey carries it: timestamps with all six stored decimals, so no two distinct keys collide. */
function keyText({ column, key }: SortColumn): SqlFragment {
  return key === 'timestamp'
    ? sql`to_char(${raw(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
    : raw(column);
}

const KEY_TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,6})?Z$/;

/** afterKey (beforeKey) as a typed SQL value; anything PostgreSQL would not read back as that key is a 422. */
function parseKey(key: SortColumn['key'], value: string, name: 'afterKey' | 'beforeKey'): SqlFragment {
  if (key === 'text') return sql`${value}::text`;
  if (!isExactTimestamp(value)) {
    throw validation({ [name]: ['must be a UTC timestamp such as 2026-11-22T10:00:00.123456Z'] });
  }
  return sql`${value}::timestamptz`;
}

/** The calendar and clock fields exist as written (no 24:00, no 31 February, no year 0). */
function isExactTimestamp(value: string): boolean {
  const m = KEY_TIMESTAMP.exec(value);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second);
  return (
    year >= 1 &&
    date.getUTCFullYear() === year &&
    date.getUTCMonth() === month - 1 &&
    date.getUTCDate() === day &&
    date.getUTCHours() === hour &&
    date.getUTCMinutes() === minute &&
    date.getUTCSeconds() === second
  );
}

/** A narrowed list's identity for `proofs`: its source and every condition, with their values. */
function keyOf(table: string, conditions: SqlFragment): string {
  const { text, values } = toQuery(conditions, false);
  return `${table}\u0000${text}\u0000${JSON.stringify(values)}`;
}

/** Keeps a count past the cap as a proof (the longest kept goes first when `proofs` is full); forgets one that no longer holds. */
function remember(proofs: Proofs, key: string, count: number, removed: number): void {
  proofs.delete(key);
  if (count > TOTAL_CAP) proofs.set(key, { count, removed });
}

function strip<T>(row: Record<string, unknown>): T {
  const { total: _t, removed: _r, ready: _y, found: _f, parent: _p, cursor_key: _k, ...item } = row;
  return item as T;
}
