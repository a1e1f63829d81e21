/** Cursor pages: a keyset after (or, mirrored, before) an anchor, limit + 1 rows; a key survives an edited anchor. */
import { raw, sql, toQuery, type SqlFragment } from '../sql.js';
import type { Queryable } from '../pool.js';
import { validation } from '../../errors.js';
import { type CursorResult, type ListPlan, type PageRequest, pageSize, strip, where } from './common.js';
import { keyText, parseKey } from './keys.js';

/** Enough for a condition matching one item in 100 to fill a page of 20 by walking. */
export const WALK_LIMIT = 2_000;

type CursorPage = Extract<PageRequest, { kind: 'cursor' }>;

export async function runCursor<T extends { id: number }>(
  db: Queryable,
  plan: ListPlan,
  page: CursorPage,
): Promise<CursorResult<T> | null> {
  // Walking back from `before` is walking forward in the opposite order.
  const backward = page.before !== undefined;
  const names = backward ? (['before', 'beforeKey'] as const) : (['after', 'afterKey'] as const);
  if (!backward && page.beforeKey !== undefined) throw validation({ beforeKey: ['needs before'] });
  const { anchor, found, after } = anchorOf(plan, page, backward, names);
  const key = plan.keyed ? sql`, ${keyText(plan.sortColumn)} AS cursor_key` : sql``;
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
  if (!head.found) throw validation({ [names[0]]: ['does not name an item of this list'] });
  const present = (rows[0] as { id: number | null }).id !== null;
  const read = (present ? rows.slice(0, page.limit) : []) as (T & { cursor_key?: string })[];
  return cursorResult(read, rows.length > page.limit, backward, page[names[0]] !== undefined);
}

/** `names`: the anchor's id and key parameters, `after` (`afterKey`) or `before` (`beforeKey`). */
function anchorOf(
  plan: ListPlan,
  page: CursorPage,
  backward: boolean,
  [idName, keyName]: readonly ['after', 'afterKey'] | readonly ['before', 'beforeKey'],
): Record<'anchor' | 'found' | 'after', SqlFragment> {
  const [anchorId, anchorKey] = [page[idName], page[keyName]];
  const { column, from, tombstones: tomb } = plan;
  const cmp = raw(plan.descending !== backward ? '<' : '>');
  if (anchorKey !== undefined) {
    if (!plan.keyed) throw validation({ [keyName]: ['applies only to sorts other than id'] });
    if (anchorId === undefined) throw validation({ [keyName]: [`needs ${idName}`] });
    const after = sql`(${column}, id) ${cmp} (${parseKey(plan.sortColumn.key, anchorKey, keyName)}, ${anchorId}::int8)`;
    return { anchor: sql``, found: raw('TRUE'), after };
  }
  if (anchorId === undefined) return { anchor: sql``, found: raw('TRUE'), after: raw('TRUE') };
  const anchorWhere = where([sql`id = ${anchorId}`, ...plan.scope]);
  if (!plan.keyed) {
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
 * A searched page: walk the sort index for up to WALK_LIMIT items (the last kept as a marker); if
 * that found too few, read all the matches (fenced by OFFSET 0) instead. The same items either way.
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

/** `read`: the rows in the order read (reversed when walking back). */
function cursorResult<T extends { id: number }>(
  read: (T & { cursor_key?: string })[],
  more: boolean,
  backward: boolean,
  anchored: boolean,
): CursorResult<T> {
  if (backward) read.reverse();
  const [first, last] = [read[0], read.at(-1)];
  const next = backward || more ? last : undefined;
  const prev = (backward ? more : anchored) ? first : undefined;
  return {
    kind: 'cursor',
    items: read.map(strip<T>),
    hasMore: backward ? last !== undefined : more,
    nextCursor: next?.id ?? null,
    nextKey: next?.cursor_key ?? null,
    prevCursor: prev?.id ?? null,
    prevKey: prev?.cursor_key ?? null,
  };
}
