/**
 * Offset pages: totals from counters the database keeps; narrowed totals are
 * counted up to a cap, or proven from an earlier count ("Proven caps" in
 * docs/architecture.md): N matches at removal count R still mean at least
 * N − (R′ − R) while the counter reads R′.
 */
import { raw, sql, toQuery, type SqlFragment } from '../sql.js';
import { perDatabase, type Queryable } from '../pool.js';
import {
  type ListOptions,
  type ListPlan,
  type ListSource,
  type OffsetResult,
  TOTAL_CAP,
  pageSize,
  strip,
} from './common.js';

/** A proof counted this far past the cap survives this many removals. */
const PROOF_SLACK = 1_000;
const MAX_PROOFS = 1_000;
const proofsFor = perDatabase<{ count: number; removed: number }>(MAX_PROOFS);
type Proofs = ReturnType<typeof proofsFor>;
type Proof = { count: number; removed: number };

type OffsetPage = { page: number; perPage: number };

export async function runOffset<T, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  filter: Filter,
  plan: ListPlan,
  page: OffsetPage,
  options: ListOptions,
): Promise<OffsetResult<T> | null> {
  const provable = plan.narrow.length > 0 && source.removals !== undefined;
  const proofs = provable ? proofsFor(db) : undefined;
  const proofKey = provable ? keyOf(source.table, plan.conditions) : '';
  const proof = proofs?.peek(proofKey);
  const query = offsetQuery(source, filter, plan, page, options, provable, proof);
  const { rows } = await db.query(toQuery(query, plan.named));
  const head = rows[0] as { total: number | null; removed?: number; ready?: boolean } | undefined;
  if (!head || head.total === null) return null;
  if (proofs) {
    if (head.ready) remember(proofs, proofKey, head.total, Number(head.removed));
    if (!proof && head.total > TOTAL_CAP) options.search?.proof.pastCap(head.ready === true);
    // Too many removals since the proof: count (the proof is forgotten).
    if (proof && head.total <= TOTAL_CAP) return runOffset(db, source, filter, plan, page, options);
  }
  const found = (rows[0] as { id: unknown }).id === null ? [] : rows.map(strip<T>);
  if (!plan.narrow.length) return { kind: 'offset', total: head.total, items: found };
  return { kind: 'offset', total: Math.min(head.total, TOTAL_CAP), capped: head.total > TOTAL_CAP, items: found };
}

function offsetQuery<F extends string, Filter>(
  source: ListSource<F, Filter>,
  filter: Filter,
  plan: ListPlan,
  page: OffsetPage,
  options: ListOptions,
  provable: boolean,
  proof: Proof | undefined,
): SqlFragment {
  const { columns, joined, from, pageConditions, conditions, parent } = plan;
  const orderBy = plan.order(plan.descending);
  const offset = (page.page - 1) * page.perPage;
  const cap = raw(String(TOTAL_CAP));
  const limit = raw(String(TOTAL_CAP + 1 + (provable ? PROOF_SLACK : 0)));
  // The lateral reference to h skips the item scan when the parent is missing;
  // OFFSET 0 keeps h evaluated once. Skipped rows are walked on the index (ids only).
  const walked = plan.unsure || proof ? sql`> ${cap}` : raw('IS NOT NULL');
  const items =
    offset === 0
      ? sql`SELECT ${columns} FROM ${joined} WHERE h.total ${walked} AND ${pageConditions}
            ${orderBy} LIMIT ${pageSize(page.perPage)}`
      : sql`SELECT ${columns} FROM ${joined} WHERE id IN (
              SELECT id FROM ${from} WHERE h.total ${walked} AND ${pageConditions}
              ${orderBy} LIMIT ${pageSize(page.perPage)} OFFSET ${offset}
            ) ${orderBy}`;
  // Where a proof can be kept, the removal count is read in the count's snapshot.
  const narrowed = (total: SqlFragment) =>
    provable
      ? sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total, removed, (${proof ? raw('TRUE') : (options.search?.proof.ready ?? raw('TRUE'))}) AS ready
            FROM (SELECT (${raw(source.removals!)})::int8 AS removed OFFSET 0) p OFFSET 0) h`
      : sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total OFFSET 0) h`;
  if (proof) {
    return sql`SELECT h.*, r.* FROM ${narrowed(sql`${proof.count}::int8 - (removed - ${proof.removed}::int8)`)}
        LEFT JOIN LATERAL (${items}) r ON TRUE`;
  }
  if (plan.unsure) {
    // Up to TOTAL_CAP matches the page is sorted from them, past it the sort index
    // is walked; h.total runs one branch. No bound OFFSET on a first page: it
    // would keep the generic plan from ever being chosen.
    const skip = offset === 0 ? sql`` : sql` OFFSET ${offset}`;
    const sorted = sql`SELECT ${columns} FROM ${joined} WHERE h.total <= ${cap} AND id IN (
          SELECT id FROM matches ${orderBy} LIMIT ${pageSize(page.perPage)}${skip}
        ) ${orderBy}`;
    return sql`WITH matches AS MATERIALIZED (SELECT ${plan.keyColumns} FROM ${from} WHERE ${conditions} LIMIT ${limit})
        SELECT h.*, r.* FROM ${narrowed(sql`SELECT count(*) FROM matches`)}
        LEFT JOIN LATERAL ((${sorted}) UNION ALL (${items})) r ON TRUE`;
  }
  const head = plan.narrow.length
    ? narrowed(sql`SELECT count(*) FROM (SELECT 1 FROM ${from} WHERE ${conditions} LIMIT ${limit}) m`)
    : sql`(SELECT (${source.total(filter)})::int8 AS total OFFSET 0) h`;
  return sql`SELECT h.*, r.* FROM ${head} LEFT JOIN LATERAL (${items}) r ON TRUE`;
}

function keyOf(table: string, conditions: SqlFragment): string {
  const { text, values } = toQuery(conditions, false);
  return `${table}\u0000${text}\u0000${JSON.stringify(values)}`;
}

function remember(proofs: Proofs, key: string, count: number, removed: number): void {
  proofs.delete(key);
  if (count > TOTAL_CAP) proofs.set(key, { count, removed });
}
