/**
 * Cursor pages: a row-value keyset `(sort_col, id) > (anchor)` in the requested
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
 * Narrowing conditions select among the items of the list; the anchor is still
 * checked against the list itself, so a walk survives an item edited out of a search.
 */
import { raw, sql, toQuery, type SqlFragment } from '../sql.js';
import type { Queryable } from '../pool.js';
import { validation } from '../../errors.js';
import {
  type CursorResult,
  type ListPlan,
  type ListSource,
  type PageRequest,
  pageSize,
  strip,
  where,
} from './common.js';
import { keyText, parseKey } from './keys.js';

/**
 * A searched cursor page walks the sort index for at most this many
 * items before reading the matches instead: enough for a condition that
 * matches one item in 100 to fill a page of 20 by walking.
 */
export const WALK_LIMIT = 2_000;

type CursorPage = Extract<PageRequest, { kind: 'cursor' }>;

/** Where the page starts: the anchor's lookup (if any), whether it named an item, and the keyset condition. */
interface Anchor {
  anchor: SqlFragment;
  found: SqlFragment;
  after: SqlFragment;
}

/** null: the parent resource does not exist. */
export async function runCursor<T extends { id: number }, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  plan: ListPlan,
  page: CursorPage,
): Promise<CursorResult<T> | null> {
  // Walking back from `before` is walking forward in the opposite order.
  const backward = page.before !== undefined;
  const idName = backward ? 'before' : 'after';
  if (!backward && page.beforeKey !== undefined) throw validation({ beforeKey: ['needs before'] });
  const { anchor, found, after } = anchorOf(source, plan, page, backward);
  const keyed = plan.sortColumn.key !== 'id';
  const key = keyed ? sql`, ${keyText(plan.sortColumn)} AS cursor_key` : sql``;
  const pageOrder = plan.order(plan.descending !== backward);
  const size = pageSize(page.limit + 1);
  const rowsRead = plan.unsure
    ? sql`SELECT ${plan.columns}${key} FROM ${plan.joined} WHERE id IN (${walkedIds(plan, after, pageOrder, size)}) ${pageOrder}`
    : sql`SELECT ${plan.columns}${key} FROM ${plan.joined} WHERE h.found AND h.parent AND ${plan.pageConditions} AND ${after}
    ${pageOrder} LIMIT ${size}`;
  const query = sql`${anchor}SELECT h.found, h.parent, r.* FROM (SELECT ${found} AS found, (${plan.parent}) AS parent OFFSET 0) h
    LEFT JOIN LATERAL (${rowsRead}) r ON TRUE`;
  const { rows } = await db.query(toQuery(query, plan.named));
  const head = rows[0] as { found: boolean; parent: boolean | null };
  if (!head.parent) return null;
  if (!head.found) throw validation({ [idName]: ['does not name an item of this list'] });
  const present = (rows[0] as { id: number | null }).id !== null;
  const read = (present ? rows.slice(0, page.limit) : []) as (T & { cursor_key?: string })[];
  return cursorResult(read, rows.length > page.limit, backward, (backward ? page.before : page.after) !== undefined);
}

function anchorOf<F extends string, Filter>(
  source: ListSource<F, Filter>,
  plan: ListPlan,
  page: CursorPage,
  backward: boolean,
): Anchor {
  const [idName, keyName] = backward ? (['before', 'beforeKey'] as const) : (['after', 'afterKey'] as const);
  const anchorId = backward ? page.before : page.after;
  const anchorKey = backward ? page.beforeKey : page.afterKey;
  const { column, from } = plan;
  const cmp = raw(plan.descending !== backward ? '<' : '>');
  const keyed = plan.sortColumn.key !== 'id';
  if (anchorKey !== undefined) {
    if (!keyed) throw validation({ [keyName]: ['applies only to sorts other than id'] });
    if (anchorId === undefined) throw validation({ [keyName]: [`needs ${idName}`] });
    const after = sql`(${column}, id) ${cmp} (${parseKey(plan.sortColumn.key, anchorKey, keyName)}, ${anchorId}::int8)`;
    return { anchor: sql``, found: raw('TRUE'), after };
  }
  if (anchorId === undefined) return { anchor: sql``, found: raw('TRUE'), after: raw('TRUE') };
  const anchorWhere = where([sql`id = ${anchorId}`, ...plan.scope]);
  const tomb = source.tombstones ? raw(source.tombstones) : undefined;
  if (!keyed) {
    const found = tomb
      ? sql`(EXISTS (SELECT 1 FROM ${from} WHERE ${anchorWhere}) OR EXISTS (SELECT 1 FROM ${tomb} WHERE ${anchorWhere}))`
      : sql`EXISTS (SELECT 1 FROM ${from} WHERE ${anchorWhere})`;
    return { anchor: sql``, found, after: sql`id ${cmp} ${anchorId}::int8` };
  }
  const tombRows = tomb ? sql` UNION ALL SELECT ${column} AS k, id FROM ${tomb} WHERE ${anchorWhere}` : sql``;
  return {
    anchor: sql`WITH anchor AS (SELECT ${column} AS k, id FROM ${from} WHERE ${anchorWhere}${tombRows} LIMIT 1) `,
    found: raw('EXISTS (SELECT 1 FROM anchor)'),
    after: sql`(${column}, id) ${cmp} (SELECT k, id FROM anchor)`,
  };
}

/**
 * The ids of a searched page (ListSearch). A cursor page has no count to tell a rare word
 * from a common one, so it tries the cheap way first: walk the sort index for
 * at most WALK_LIMIT listed items after the anchor, keeping those that match
 * (a common word fills the page in a few dozen). The walk's WALK_LIMIT-th item
 * is kept too, as a marker: it is read only when the walk went that far. If it
 * did and found no more than `limit` matches, the page is read from the
 * matches instead: all of them, planned on their own (OFFSET 0 fences them: a
 * bitmap of the GIN index for a word), then those after the anchor, sorted.
 * The anchor's condition stays outside the fence: planned without the
 * anchor's key, the planner guesses it keeps a third of the table and ANDs
 * the GIN bitmap with a bitmap of the sort index over that range, which reads
 * up to the whole index to save nothing. Either way the page is the first
 * limit + 1 matches after the anchor (the walk's matches are the first ones,
 * since it walks in order): where the walk stops decides the cost only, never
 * the items.
 */
function walkedIds(plan: ListPlan, after: SqlFragment, pageOrder: SqlFragment, size: SqlFragment): SqlFragment {
  const { from } = plan;
  const walkLimit = raw(String(WALK_LIMIT));
  const walkConditions = where([...plan.listed, ...plan.hints, after]);
  return sql`WITH walk AS (
          SELECT id, hit, row_number() OVER () AS n FROM (
            SELECT id, (${where(plan.narrow)}) AS hit FROM ${from} WHERE h.found AND h.parent AND ${walkConditions}
            ${pageOrder} LIMIT ${walkLimit}
          ) w
        ),
        walked AS MATERIALIZED (SELECT id, hit, n FROM walk WHERE hit OR n = ${walkLimit} LIMIT ${size}),
        short AS (SELECT count(*) FILTER (WHERE hit) < ${size} AND count(*) FILTER (WHERE n = ${walkLimit}) > 0 AS yes FROM walked)
        SELECT id FROM walked WHERE hit AND NOT (SELECT yes FROM short)
        UNION ALL
        (SELECT id FROM (SELECT ${plan.keyColumns} FROM ${from} WHERE ${plan.conditions} OFFSET 0) m
          WHERE (SELECT yes FROM short) AND ${after} ${pageOrder} LIMIT ${size})`;
}

/** `read`: the page's rows in the order read (reversed when walking back); `anchored`: the request named an anchor. */
function cursorResult<T extends { id: number }>(
  read: (T & { cursor_key?: string })[],
  more: boolean,
  backward: boolean,
  anchored: boolean,
): CursorResult<T> {
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
  const preceded = anchored && first !== undefined;
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
