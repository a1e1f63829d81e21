/**
 * Offset pages: kept totals; a narrowed list counts up to EXACT_TOTAL_UP_TO, past it the planner estimates (and
 * a word known to be common is counted only when the planner expects it under the threshold).
 * A deep page of a ranked list starts where its ranks say; a page as of a snapshot leaves out what the snapshot did
 * not see, keeps the places of what was deleted since, and takes its total from it (docs/api.md §5,
 * docs/architecture.md "Lists").
 */
import { raw, sql, toQuery, type SqlFragment } from '../sql.js';
import type { Queryable } from '../pool.js';
import {
  type ListPlan,
  type OffsetResult,
  type PageRequest,
  type Snapshot,
  EXACT_TOTAL_UP_TO,
  RANKED_FROM_OFFSET,
  pageSize,
  strip,
  where,
} from './common.js';

type OffsetPage = Extract<PageRequest, { kind: 'offset' }>;

interface Head {
  total: number | null;
  /** The point a page without a snapshot was read at. */
  snapshot_xids: string;
  snapshot_top: number | null;
}

export async function runOffset<T>(db: Queryable, plan: ListPlan, page: OffsetPage): Promise<OffsetResult<T> | null> {
  const { snapshot } = plan;
  // A common word's matches are not counted while the planner too expects more than the threshold: counting them
  // was nearly all of such a page's cost (bench/RESULTS.md, search-common).
  let guess: number | undefined;
  if (plan.common && !snapshot) guess = await estimate(db, plan);
  const uncounted = guess !== undefined && guess > EXACT_TOTAL_UP_TO ? guess : undefined;
  const { rows } = await db.query(toQuery(offsetQuery(plan, page, uncounted), plan.named));
  const head = rows[0] as Head | undefined;
  if (!head || head.total === null) return null;
  const items = (rows[0] as { id: unknown }).id === null ? [] : rows.map(strip<T>);
  if (snapshot) {
    const estimated = plan.narrow.length ? { estimated: snapshot.estimated } : {};
    return { kind: 'offset', total: head.total, ...estimated, items };
  }
  const made = { xids: head.snapshot_xids, top: Number(head.snapshot_top ?? 0) };
  if (!plan.narrow.length) return { kind: 'offset', total: head.total, items, made };
  if (uncounted !== undefined) {
    // Never below the items this page shows.
    const seen = (page.page - 1) * page.perPage + items.length;
    return { kind: 'offset', total: Math.max(uncounted, seen), estimated: true, items, made };
  }
  if (head.total <= EXACT_TOTAL_UP_TO) return { kind: 'offset', total: head.total, estimated: false, items, made };
  plan.pastThreshold();
  // A common word counted because the planner expected fewer: its answer is the estimate, not asked again.
  const planned = guess ?? (await estimate(db, plan));
  return { kind: 'offset', total: Math.max(head.total, planned), estimated: true, items, made };
}

/** The planner's row count for the list's conditions (never below what was counted). */
async function estimate(db: Queryable, plan: ListPlan): Promise<number> {
  const { rows } = await db.query<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
    toQuery(sql`EXPLAIN (FORMAT JSON) SELECT 1 FROM ${plan.from} WHERE ${plan.planned}`, false),
  );
  return Math.round(rows[0]!['QUERY PLAN'][0].Plan['Plan Rows']);
}

/** `estimated`: the planner's count of a common word's matches, which the page then does not count. */
function offsetQuery(plan: ListPlan, page: OffsetPage, estimated?: number): SqlFragment {
  const offset = (page.page - 1) * page.perPage;
  // A shallow page walks its offset: fewer entries than the ranks would sum to find its start.
  const ranked = offset >= RANKED_FROM_OFFSET ? plan.ranked : undefined;
  if (plan.snapshot || ranked) return walkedQuery(plan, page, offset, ranked);
  const { columns, joined, from, conditions, bound } = plan;
  const counting = plan.unsure && estimated === undefined;
  // A counted range in id order: the walk that counts it also finds the page's first id (h.bound).
  const counted = bound !== undefined && !plan.unsure;
  const pageConditions = counted ? sql`${conditions} AND id ${bound.cmp} h.bound` : plan.pageConditions;
  const orderBy = plan.order(plan.descending);
  const cap = raw(String(EXACT_TOTAL_UP_TO));
  const limit = raw(String(EXACT_TOTAL_UP_TO + 1));
  // The lateral reference to h skips the item scan when the parent is missing;
  // OFFSET 0 keeps h evaluated once. Skipped rows are walked on the index (ids only).
  const walked = counting ? sql`> ${cap}` : raw('IS NOT NULL');
  const items =
    offset === 0
      ? sql`SELECT ${columns} FROM ${joined} WHERE h.total ${walked} AND ${pageConditions}
            ${orderBy} LIMIT ${pageSize(page.perPage)}`
      : sql`SELECT ${columns} FROM ${joined} WHERE id IN (
              SELECT id FROM ${from} WHERE h.total ${walked} AND ${pageConditions}
              ${orderBy} LIMIT ${pageSize(page.perPage)} OFFSET ${offset}
            ) ${orderBy}`;
  if (counting) {
    // Up to the threshold the page is sorted from the matches, past it the sort index is walked.
    // No bound OFFSET on a first page: it would keep the generic plan from ever being chosen.
    const skip = offset === 0 ? sql`` : sql` OFFSET ${offset}`;
    const sorted = sql`SELECT ${columns} FROM ${joined} WHERE h.total <= ${cap} AND id IN (
          SELECT id FROM matches ${orderBy} LIMIT ${pageSize(page.perPage)}${skip}
        ) ${orderBy}`;
    return sql`WITH matches AS MATERIALIZED (SELECT ${plan.keyColumns} FROM ${from} WHERE ${conditions} LIMIT ${limit})
        SELECT h.*, ${madeAt(plan)}, r.* FROM ${narrowedHead(plan, sql`SELECT count(*) FROM matches`)}
        LEFT JOIN LATERAL ((${sorted}) UNION ALL (${items})) r ON TRUE`;
  }
  const head = estimated === undefined ? offsetHead(plan, counted) : narrowedHead(plan, sql`SELECT ${estimated}::int8`);
  return sql`SELECT h.total, ${madeAt(plan)}, r.* FROM ${head} LEFT JOIN LATERAL (${items}) r ON TRUE`;
}

/** The point this statement reads at, handed out as the snapshot of a page requested without one. */
function madeAt(plan: ListPlan): SqlFragment {
  return sql`pg_current_snapshot()::text AS snapshot_xids, (SELECT max(id) FROM ${plan.from}) AS snapshot_top`;
}

/**
 * A page found by walking from a start: as of a snapshot (its total is the snapshot's), or deep in a ranked list,
 * where the ranks give the first key of the range the page falls in and how many items to skip from there.
 */
function walkedQuery(plan: ListPlan, page: OffsetPage, offset: number, ranked: ListPlan['ranked']): SqlFragment {
  const { columns, joined, snapshot } = plan;
  const orderBy = plan.order(plan.descending);
  const size = pageSize(page.perPage);
  const head = snapshot ? narrowedHead(plan, sql`SELECT ${snapshot.total}::int8`) : offsetHead(plan, false);
  const start = ranked ? rankedStart(plan, ranked, offset) : undefined;
  const skip = start ? sql`(SELECT rest FROM start)` : sql`${offset}::int8`;
  const conditions = [plan.pageConditions];
  if (start) conditions.push(start.from);
  if (snapshot) conditions.push(asOf(plan, snapshot));
  const live = (columns: SqlFragment) =>
    sql`SELECT ${columns} FROM ${plan.from} WHERE h.total IS NOT NULL AND ${where(conditions)}`;
  // A search's matches cannot be told among deleted items (the tombstones keep no text): they lose their place.
  const ids =
    snapshot && plan.tombstones && !plan.unsure
      ? withDeleted(plan, snapshot, live(plan.keyColumns), start?.from, skip, size)
      : sql`${live(raw('id'))} ${orderBy} LIMIT ${size} OFFSET ${skip}`;
  const made = snapshot ? sql`` : sql`, ${madeAt(plan)}`;
  return sql`${start?.cte ?? sql``} SELECT h.total${made}, r.* FROM ${head} LEFT JOIN LATERAL (
      SELECT ${columns} FROM ${joined} WHERE id IN (${ids}) ${orderBy}) r ON TRUE`;
}

/** The ranks' answer for this page (post_page_start in the migrations): where to start walking, and what to skip. */
function rankedStart(
  plan: ListPlan,
  ranked: NonNullable<ListPlan['ranked']>,
  offset: number,
): { cte: SqlFragment; from: SqlFragment } {
  const { snapshot } = plan;
  const cmp = raw(plan.descending ? '<=' : '>=');
  const key = raw(ranked.byKey ? 'from_created' : 'from_id');
  const point = snapshot ? sql`${snapshot.xids}::pg_snapshot, ${snapshot.top}::int8` : raw('NULL, NULL');
  return {
    cte: sql`WITH start AS MATERIALIZED (SELECT * FROM ${ranked.start}(${ranked.scope}, ${ranked.byKey},
        ${plan.descending}, ${offset}::int8, ${point}))`,
    from: sql`${plan.column} ${cmp} (SELECT ${key} FROM start)`,
  };
}

/**
 * The rows (or tombstones) the snapshot saw: those up to the largest id it saw, where the table's inserts commit in
 * the order of their ids (attach_snapshots, in the migrations); elsewhere, those whose creator it saw committed.
 */
function asOf(plan: ListPlan, { xids, top }: Snapshot): SqlFragment {
  return plan.inIdOrder ? sql`id <= ${top}::int8` : sql`pg_visible_in_snapshot(created_xid, ${xids}::pg_snapshot)`;
}

/**
 * The page's ids among the live rows and the items deleted since the snapshot, which keep their place: they are
 * walked, then not shown (the page reads the table). Those deleted items are few, so the live rows need only be
 * walked from `skip` minus their number: the page is the merged positions skip to skip + size.
 */
function withDeleted(
  plan: ListPlan,
  snapshot: Snapshot,
  live: SqlFragment,
  from: SqlFragment | undefined,
  skip: SqlFragment,
  size: SqlFragment,
): SqlFragment {
  const orderBy = plan.order(plan.descending);
  const { xids } = snapshot;
  const since = sql`${asOf(plan, snapshot)} AND deleted_xid >= pg_snapshot_xmin(${xids}::pg_snapshot)
      AND NOT pg_visible_in_snapshot(deleted_xid, ${xids}::pg_snapshot)`;
  const conditions = [since, ...plan.scope, ...plan.narrow];
  if (from) conditions.push(from);
  return sql`WITH deleted AS MATERIALIZED (SELECT ${plan.keyColumns} FROM ${plan.tombstones!} WHERE ${where(conditions)}),
      below AS (SELECT greatest(0, ${skip} - count(*)) AS lo, count(*) AS n FROM deleted)
    SELECT id FROM (
      SELECT id, row_number() OVER (${orderBy}) - 1 + (SELECT lo FROM below) AS at FROM (
        (${live} ${orderBy} LIMIT ${size} + (SELECT n FROM below) OFFSET (SELECT lo FROM below))
        UNION ALL SELECT * FROM deleted) m
    ) merged WHERE at >= ${skip} AND at < ${skip} + ${size}`;
}

/** `h`: the count of `total`'s rows, NULL when the parent is missing. */
function narrowedHead(plan: ListPlan, total: SqlFragment): SqlFragment {
  return sql`(SELECT (CASE WHEN ${plan.parent} THEN (${total}) END)::int8 AS total OFFSET 0) h`;
}

/** `h` of a page that is not a search: the list's total, NULL when the parent is missing. */
function offsetHead(plan: ListPlan, counted: boolean): SqlFragment {
  const { from, conditions, parent, bound } = plan;
  if (counted && bound) {
    return sql`(SELECT (CASE WHEN ${parent} THEN c.n END)::int8 AS total, c.bound FROM (
          SELECT count(*) AS n, ${bound.agg}(id) AS bound FROM ${from} WHERE ${conditions}) c OFFSET 0) h`;
  }
  if (plan.narrow.length > 0) {
    // Counted up to the threshold; past it runOffset asks the planner.
    const limit = raw(String(EXACT_TOTAL_UP_TO + 1));
    return narrowedHead(plan, sql`SELECT count(*) FROM (SELECT 1 FROM ${from} WHERE ${conditions} LIMIT ${limit}) m`);
  }
  // The whole list: its total is kept by the triggers.
  return sql`(SELECT (${plan.total})::int8 AS total OFFSET 0) h`;
}
