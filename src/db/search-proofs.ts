/**
 * Searches whose capped totals may be proven instead of counted again
 * (src/db/pagination/offset.ts, "Proven caps"). A proof of "more than 10 000 posts
 * match `q`" stands while no post has left the matches, and an edit of a
 * title or body can take a post out of a search: the posts_edited trigger
 * (migrations/1700000000000_baseline.sql) counts such an edit as a
 * removal when it takes the post out of a search registered in
 * `search_proofs`. Counting every edit instead would cost each one an UPDATE
 * of a counter row; checking it against the few registered searches costs a
 * lookup.
 *
 * An edit that checked the registry before `q` was in it did not count for
 * `q`, so a count of `q` is a proof only if its snapshot sees every such edit
 * ended: `q` is registered, then every transaction that may have started
 * writing before that commit is waited for, then `q` is marked settled, and
 * a count whose snapshot sees it settled may stand (`searchSettled`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { perDatabase, type Queryable } from './pool.js';
import { prepared, sql } from './sql.js';

/** Every edit of a title or body is checked against each registered search: keep them few. */
export const MAX_SEARCH_PROOFS = 64;
const SETTLE_TIMEOUT_MS = 2_000;
const SETTLE_POLL_MS = 20;
/** After a settling that did not finish (a long transaction, a full registry, an error), the search is left counted this long. */
const RETRY_AFTER_MS = 60_000;

/** Boolean SQL: may a count of `q` made in this statement's snapshot stand as a proof? */
export const searchSettled = (q: string) => sql`EXISTS (SELECT 1 FROM search_proofs WHERE q = ${q} AND settled)`;

/** Per primary: searches this instance has counted past the cap (the one found longest ago is forgotten past 1 000). */
const commonOn = perDatabase<true>(1_000);

/**
 * Whether this instance has counted more than the cap of `q`'s matches. Its
 * statements then show the planner the word (src/db/views.ts `searchMatches`):
 * when such a search is counted again (not settled yet, or its proof used up),
 * the planner counts the first 11 001 matches of a word it knows is common by
 * a walk, about 17 ms of database CPU, where a plan made for any word reads a
 * bitmap of all of them, about 100 ms.
 */
export function isCommonSearch(primary: Queryable, q: string): boolean {
  return commonOn(primary).has(q);
}

/** A count found more than the cap of `q`'s matches; `kept`: it stands as a proof, else `q` is settled so that the next one can. */
export function foundPastCap(primary: Queryable, q: string, kept: boolean): void {
  const common = commonOn(primary);
  common.delete(q);
  common.set(q, true);
  if (!kept) settleSearch(primary, q);
}

/**
 * Per primary: searches being settled (BEING_SETTLED) or left counted until a
 * time (performance.now()); bounded like the registry.
 */
const settlingOn = perDatabase<number>(4 * MAX_SEARCH_PROOFS);
const BEING_SETTLED = Infinity;

/**
 * Registers `q` on the primary and settles it, in the background, once per
 * search at a time per instance. A failure, a full registry or a transaction
 * still running after SETTLE_TIMEOUT_MS leaves `q` counted, as before, and a
 * count past the cap tries again after RETRY_AFTER_MS.
 */
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

/** Whether `q` is settled (now, or already). */
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
  // Any edit that checked the registry before the INSERT committed got its
  // transaction id earlier than this one (ids are handed out in order); once
  // the oldest running transaction is younger than this one, all have ended.
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
