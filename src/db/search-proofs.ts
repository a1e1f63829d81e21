/**
 * The registry of searches whose capped totals may be proven: the posts_edited
 * trigger counts an edit as a removal only for registered searches. A search is
 * settled once every edit that may have missed its registration has ended
 * (docs/architecture.md, "Proven caps").
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { perDatabase, type Queryable } from './pool.js';
import { prepared, sql } from './sql.js';

/** Every edit of a title or body is checked against each registered search: keep them few. */
export const MAX_SEARCH_PROOFS = 64;
const SETTLE_TIMEOUT_MS = 2_000;
const SETTLE_POLL_MS = 20;
/** A search whose settling did not finish is left counted this long. */
const RETRY_AFTER_MS = 60_000;

export const searchSettled = (q: string) => sql`EXISTS (SELECT 1 FROM search_proofs WHERE q = ${q} AND settled)`;

const commonOn = perDatabase<true>(1_000);

/** A word counted past the cap is shown to the planner, which then counts it by a cheap walk. */
export function isCommonSearch(primary: Queryable, q: string): boolean {
  return commonOn(primary).has(q);
}

/** `kept`: the count stands as a proof; else `q` is settled so that the next one can. */
export function foundPastCap(primary: Queryable, q: string, kept: boolean): void {
  const common = commonOn(primary);
  common.delete(q);
  common.set(q, true);
  if (!kept) settleSearch(primary, q);
}

/** Searches being settled, or left counted until a time (performance.now()). */
const settlingOn = perDatabase<number>(4 * MAX_SEARCH_PROOFS);
const BEING_SETTLED = Infinity;

function settleSearch(primary: Queryable, q: string): void {
  const settling = settlingOn(primary);
  if (performance.now() < (settling.peek(q) ?? -Infinity)) return;
  settling.set(q, BEING_SETTLED);
  void settle(primary, q)
    // Only an optimisation: a search not settled stays counted, and is tried again later.
    .catch(() => false)
    .then((settled) => {
      if (settled) settling.delete(q);
      else settling.set(q, performance.now() + RETRY_AFTER_MS);
    });
}

async function settle(primary: Queryable, q: string): Promise<boolean> {
  const { rows } = await primary.query<{ settled: boolean }>(
    prepared(
      `INSERT INTO search_proofs (q, query) SELECT $1, websearch_to_tsquery('posts_search', $1)
       WHERE (SELECT count(*) FROM search_proofs) < ${MAX_SEARCH_PROOFS}
       ON CONFLICT (q) DO UPDATE SET q = excluded.q RETURNING settled`,
      [q],
    ),
  );
  if (rows.length === 0) return false;
  if (rows[0]!.settled) return true;
  // An edit that missed the registration has an older transaction id than ours.
  const { rows: ids } = await primary.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid');
  const deadline = performance.now() + SETTLE_TIMEOUT_MS;
  for (;;) {
    const { rows: done } = await primary.query<{ ended: boolean }>(
      prepared('SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8 AS ended', [ids[0]!.xid]),
    );
    if (done[0]!.ended) break;
    if (performance.now() > deadline) return false;
    await sleep(SETTLE_POLL_MS);
  }
  await primary.query(prepared('UPDATE search_proofs SET settled = true WHERE q = $1', [q]));
  return true;
}
