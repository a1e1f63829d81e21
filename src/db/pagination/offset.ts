/** Offset pages: kept totals; a narrowed list counts up to EXACT_TOTAL_UP_TO, past it the planner estimates. */
import { raw, sql, toQuery, type SqlFragment } from '../sql.js';
import type { Queryable } from '../pool.js';
import { type ListPlan, type OffsetResult, type PageRequest, EXACT_TOTAL_UP_TO, pageSize, strip } from './common.js';

type OffsetPage = Extract<PageRequest, { kind: 'offset' }>;

export async function runOffset<T>(db: Queryable, plan: ListPlan, page: OffsetPage): Promise<OffsetResult<T> | null> {
  const { rows } = await db.query(toQuery(offsetQuery(plan, page), plan.named));
  const head = rows[0] as { total: number | null } | undefined;
  if (!head || head.total === null) return null;
  const items = (rows[0] as { id: unknown }).id === null ? [] : rows.map(strip<T>);
  if (!plan.narrow.length) return { kind: 'offset', total: head.total, items };
  if (head.total <= EXACT_TOTAL_UP_TO) return { kind: 'offset', total: head.total, estimated: false, items };
  plan.pastThreshold();
  return { kind: 'offset', total: Math.max(head.total, await estimate(db, plan)), estimated: true, items };
}

/** The planner's row count for the list's conditions (never below what was counted). */
async function estimate(db: Queryable, plan: ListPlan): Promise<number> {
  const { rows } = await db.query<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
    toQuery(sql`EXPLAIN (FORMAT JSON) SELECT 1 FROM ${plan.from} WHERE ${plan.planned}`, false),
  );
  return Math.round(rows[0]!['QUERY PLAN'][0].Plan['Plan Rows']);
}

function offsetQuery(plan: ListPlan, page: OffsetPage): SqlFragment {
  const { columns, joined, from, conditions, bound } = plan;
  // A counted range in id order: the walk that counts it also finds the page's first id (h.bound).
  const counted = bound !== undefined && !plan.unsure;
  const pageConditions = counted ? sql`${conditions} AND id ${bound.cmp} h.bound` : plan.pageConditions;
  const orderBy = plan.order(plan.descending);
  const offset = (page.page - 1) * page.perPage;
  const cap = raw(String(EXACT_TOTAL_UP_TO));
  const limit = raw(String(EXACT_TOTAL_UP_TO + 1));
  // The lateral reference to h skips the item scan when the parent is missing;
  // OFFSET 0 keeps h evaluated once. Skipped rows are walked on the index (ids only).
  const walked = plan.unsure ? sql`> ${cap}` : raw('IS NOT NULL');
  const items =
    offset === 0
      ? sql`SELECT ${columns} FROM ${joined} WHERE h.total ${walked} AND ${pageConditions}
            ${orderBy} LIMIT ${pageSize(page.perPage)}`
      : sql`SELECT ${columns} FROM ${joined} WHERE id IN (
              SELECT id FROM ${from} WHERE h.total ${walked} AND ${pageConditions}
              ${orderBy} LIMIT ${pageSize(page.perPage)} OFFSET ${offset}
            ) ${orderBy}`;
  if (plan.unsure) {
    // Up to the threshold the page is sorted from the matches, past it the sort index is walked.
    // No bound OFFSET on a first page: it would keep the generic plan from ever being chosen.
    const skip = offset === 0 ? sql`` : sql` OFFSET ${offset}`;
    const sorted = sql`SELECT ${columns} FROM ${joined} WHERE h.total <= ${cap} AND id IN (
          SELECT id FROM matches ${orderBy} LIMIT ${pageSize(page.perPage)}${skip}
        ) ${orderBy}`;
    return sql`WITH matches AS MATERIALIZED (SELECT ${plan.keyColumns} FROM ${from} WHERE ${conditions} LIMIT ${limit})
        SELECT h.*, r.* FROM ${narrowedHead(plan, sql`SELECT count(*) FROM matches`)}
        LEFT JOIN LATERAL ((${sorted}) UNION ALL (${items})) r ON TRUE`;
  }
  return sql`SELECT h.total, r.* FROM ${offsetHead(plan, counted)} LEFT JOIN LATERAL (${items}) r ON TRUE`;
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
