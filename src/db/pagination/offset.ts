/**
 * Offset pages: LIMIT/OFFSET, with the total read from a counter the database
 * keeps (ListSource.total), never a COUNT(*) over a big table.
 *
 * Narrowing filters (`q`, date ranges: ListOptions.narrow) have no counter:
 * their totals are counted, up to TOTAL_CAP + 1 rows (or PROOF_SLACK more,
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
 * A search (ListSearch) reads its page from the
 * matches themselves when fewer than TOTAL_CAP match, and from a walk of the
 * sort index otherwise.
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

/** How far past the cap a count goes where a proof can be kept: a proof then survives this many removals. */
const PROOF_SLACK = 1_000;
const MAX_PROOFS = 1_000;
/** Per database (a pool, a replica): narrowed list (source and conditions) → the newest count past the cap and the removal count it was made at. */
const proofsFor = perDatabase<{ count: number; removed: number }>(MAX_PROOFS);
type Proofs = ReturnType<typeof proofsFor>;
type Proof = { count: number; removed: number };

type OffsetPage = { page: number; perPage: number };

/** null: the parent resource does not exist. */
export async function runOffset<T, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  filter: Filter,
  plan: ListPlan,
  page: OffsetPage,
  options: ListOptions,
): Promise<OffsetResult<T> | null> {
  // A narrowed total past the cap may be proven rather than counted ("Proven
  // caps" above). Where a proof can be kept, the count goes PROOF_SLACK past
  // the cap, and reads the removal counter in the same snapshot.
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
  // The lateral reference to h forces a nested loop with h outside, which keeps
  // the inner ORDER BY and skips the item scan entirely when the parent is missing.
  // OFFSET 0 keeps h a subquery evaluated once, instead of its expression being
  // copied into (and run again by) the lateral part.
  // Past the first page the skipped rows are walked on the sort index alone (ids
  // only, an index-only scan) and just the page's rows are read and rendered:
  // selecting all columns would fetch and format every skipped row.
  // A search walks the sort index only when more than TOTAL_CAP match
  // (below), as does a proven one, whose statement stops there when the proof no longer holds.
  const walked = plan.unsure || proof ? sql`> ${cap}` : raw('IS NOT NULL');
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
      ? sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total, removed, (${proof ? raw('TRUE') : (options.search?.proof.ready ?? raw('TRUE'))}) AS ready
            FROM (SELECT (${raw(source.removals!)})::int8 AS removed OFFSET 0) p OFFSET 0) h`
      : sql`(SELECT (CASE WHEN ${parent} THEN (${total}) END)::int8 AS total OFFSET 0) h`;
  if (proof) {
    return sql`SELECT h.*, r.* FROM ${narrowed(sql`${proof.count}::int8 - (removed - ${proof.removed}::int8)`)}
        LEFT JOIN LATERAL (${items}) r ON TRUE`;
  }
  if (plan.unsure) {
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
    // chosen (ListSearch.shown).
    const skip = offset === 0 ? sql`` : sql` OFFSET ${offset}`;
    const sorted = sql`SELECT ${columns} FROM ${joined} WHERE h.total <= ${cap} AND id IN (
          SELECT id FROM matches ${orderBy} LIMIT ${pageSize(page.perPage)}${skip}
        ) ${orderBy}`;
    return sql`WITH matches AS MATERIALIZED (SELECT ${plan.keyColumns} FROM ${from} WHERE ${conditions} LIMIT ${limit})
        SELECT h.*, r.* FROM ${narrowed(sql`SELECT count(*) FROM matches`)}
        LEFT JOIN LATERAL ((${sorted}) UNION ALL (${items})) r ON TRUE`;
  }
  // A narrowed list has no counter: its matches are counted, up to the limit,
  // which an index on the narrowing condition bounds.
  const head = plan.narrow.length
    ? narrowed(sql`SELECT count(*) FROM (SELECT 1 FROM ${from} WHERE ${conditions} LIMIT ${limit}) m`)
    : sql`(SELECT (${source.total(filter)})::int8 AS total OFFSET 0) h`;
  return sql`SELECT h.*, r.* FROM ${head} LEFT JOIN LATERAL (${items}) r ON TRUE`;
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
