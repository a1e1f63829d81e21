/**
 * Searches whose capped totals may be proven instead of counted again
 * (src/db/pagination.ts, "Proven caps"). A proof of "more than 10 000 posts
 * match `q`" stands while no post has left the matches, and an edit of a
 * title or body can take a post out of a search: the posts_edited trigger
 * (migrations/1795600000000_posts_removed.sql) counts such an edit as a
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
import type { Queryable } from './pool.js';
import { prepared, sql } from './sql.js';

/** Every edit of a title or body is checked against each registered search: keep them few. */
export const MAX_SEARCH_PROOFS = 64;
const SETTLE_TIMEOUT_MS = 2_000;
const SETTLE_POLL_MS = 20;

/** Boolean SQL: may a count of `q` made in this statement's snapshot stand as a proof? */
export const searchSettled = (q: string) => sql`EXISTS (SELECT 1 FROM search_proofs WHERE q = ${q} AND settled)`;

const settling = new WeakMap<Queryable, Set<string>>();

/**
 * Registers `q` on the primary and settles it, in the background, once per
 * search at a time per instance. A failure, a full registry or a transaction
 * still running after SETTLE_TIMEOUT_MS leaves `q` counted, as before, and a
 * later count past the cap tries again.
 */
export function settleSearch(primary: Queryable, q: string): void {
  let running = settling.get(primary);
  if (running === undefined) settling.set(primary, (running = new Set()));
  if (running.has(q)) return;
  const active = running;
  active.add(q);
  settle(primary, q)
    // Only an optimisation: the search stays counted, and the next count past the cap retries.
    .catch(() => {})
    .finally(() => active.delete(q));
}

async function settle(primary: Queryable, q: string): Promise<void> {
  const { rows } = await primary.query<{ settled: boolean }>(
    prepared(
      `INSERT INTO search_proofs (q, query) SELECT $1, websearch_to_tsquery('posts_search', $1)
       WHERE (SELECT count(*) FROM search_proofs) < ${MAX_SEARCH_PROOFS}
       ON CONFLICT (q) DO UPDATE SET q = excluded.q RETURNING settled`,
      [q],
    ),
  );
  if (rows.length === 0 || rows[0]!.settled) return;
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
    if (performance.now() > deadline) return;
    await sleep(SETTLE_POLL_MS);
  }
  await primary.query(prepared('UPDATE search_proofs SET settled = true WHERE q = $1', [q]));
}
