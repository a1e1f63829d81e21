/**
 * The checker: what clients were told against what the database holds, read
 * with plain SQL (never through the service), and the figures of a scenario.
 */
import type pg from 'pg';
import { BOUND_MS, percentile, type Outcome, type Write } from './load.js';

export interface Verdict {
  sent: number;
  acknowledged: number;
  /** Acknowledged (201) but not in the database, or there under another id. */
  lost: string[];
  /** In the database more than once. */
  duplicated: string[];
  /** Not acknowledged, yet committed (allowed: at most once; a keyed retry then replays it). */
  committedUnacknowledged: number;
  /** Keyed unacknowledged writes whose retry with the key did not end in exactly one row. */
  retryFailures: string[];
  keyedRetried: number;
  keyedReplayed: number;
  /** Posts whose kept comment total (comment_counts) disagrees with their comments. */
  halfMade: number;
  /** Unacknowledged comments whose retry found their post gone: it was a lost acknowledged write (asynchronous failover). */
  orphaned: number;
}

/** Each write's rows in the database, by tag (a post's title, a comment's body). */
export async function checkWrites(db: pg.Pool, label: string, writes: Write[]): Promise<Verdict> {
  const like = `${label}-%`;
  const posts = await db.query<{ id: number; tag: string }>(
    'SELECT id::int, title AS tag FROM posts WHERE title LIKE $1',
    [like],
  );
  const comments = await db.query<{ id: number; tag: string }>(
    'SELECT id::int, body AS tag FROM comments WHERE body LIKE $1',
    [like],
  );
  const rows = new Map<string, number[]>();
  for (const r of [...posts.rows, ...comments.rows]) rows.set(r.tag, [...(rows.get(r.tag) ?? []), r.id]);

  const verdict: Verdict = {
    sent: writes.length,
    acknowledged: 0,
    lost: [],
    duplicated: [],
    committedUnacknowledged: 0,
    retryFailures: [],
    keyedRetried: 0,
    keyedReplayed: 0,
    halfMade: 0,
    orphaned: 0,
  };
  const lostPosts = new Set(
    writes.filter((w) => w.kind === 'post' && w.status === 201 && !rows.get(w.tag)?.includes(w.id!)).map((w) => w.id),
  );
  for (const w of writes) {
    const ids = rows.get(w.tag) ?? [];
    if (ids.length > 1)
      verdict.duplicated.push(`${w.tag} (${w.kind} ids ${ids.join(', ')}, first answered ${w.status})`);
    if (w.status === 201) {
      verdict.acknowledged += 1;
      if (ids.length === 0 || !ids.includes(w.id!))
        verdict.lost.push(`${w.tag} (${w.kind} ${w.id}, acknowledged at ${(w.end / 1000).toFixed(2)} s)`);
      continue;
    }
    if (ids.length > 0 && !w.retries?.some((r) => r.status === 201)) verdict.committedUnacknowledged += 1;
    if (w.retries) {
      verdict.keyedRetried += 1;
      const last = w.retries.at(-1);
      if (last?.status === 404 && ids.length === 0 && lostPosts.has(w.postId)) verdict.orphaned += 1;
      else if (!last) verdict.retryFailures.push(`${w.tag}: not retried (the run's retry time was up)`);
      else if (last.status !== 201)
        verdict.retryFailures.push(
          `${w.tag}: retries answered ${w.retries.map((r) => r.status).join(',')} (${last.message ?? ''})`,
        );
      else if (ids.length !== 1 || ids[0] !== w.retriedId)
        verdict.retryFailures.push(
          `${w.tag}: retry answered ${w.retriedId}, database holds ${ids.join(', ') || 'nothing'}`,
        );
      else if (w.replayed) verdict.keyedReplayed += 1;
    }
  }
  const { rows: half } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM posts p
     WHERE COALESCE((SELECT n FROM comment_counts k WHERE k.post_id = p.id), 0) <> (SELECT count(*) FROM comments c WHERE c.post_id = p.id)`,
  );
  verdict.halfMade = half[0]!.n;
  return verdict;
}

export interface Window {
  /** When the fault was injected (ms on the run's clock). */
  fault: number;
  /** When it was removed (the database back, the partition healed…). */
  healed: number;
}

export interface Figures {
  statuses: Record<string, number>;
  /** 5xx answers by status and message. */
  errors: Record<string, number>;
  cutOff: number;
  overBound: number;
  slowest: number;
  unavailableS: number;
  recoveryS: number | undefined;
  p99: { before?: number; during?: number; after?: number };
}

/**
 * Availability figures of the writes around a fault: unavailable from the
 * first failed write after the fault to the end of the first success after
 * the last failure; recovery is that end minus the moment the fault healed.
 */
export function figures(outcomes: Outcome[], writes: Outcome[], window: Window | undefined): Figures {
  const statuses: Record<string, number> = {};
  const errors: Record<string, number> = {};
  let cutOff = 0;
  let overBound = 0;
  let slowest = 0;
  for (const o of outcomes) {
    const code = o.status === 0 ? 'cut off' : o.status === -1 ? 'hung' : String(o.status);
    statuses[code] = (statuses[code] ?? 0) + 1;
    if (o.status >= 500)
      errors[`${o.status} ${o.message ?? ''}`.trim()] = (errors[`${o.status} ${o.message ?? ''}`.trim()] ?? 0) + 1;
    if (o.status === 0) cutOff += 1;
    const ms = o.end - o.start;
    if (o.status === -1 || ms > BOUND_MS) overBound += 1;
    slowest = Math.max(slowest, ms);
  }
  const ok = (o: Outcome) => o.status >= 200 && o.status < 300;
  let unavailableS = 0;
  let recoveryS: number | undefined;
  let servedAgain = Infinity;
  if (window) {
    const failures = writes.filter((o) => !ok(o) && o.end >= window.fault);
    // Unavailable: the 100 ms steps in which writes failed and none was acknowledged (a write
    // answered late is counted in "over bound", not here).
    const lastEnd = Math.max(...writes.map((o) => o.end));
    for (let t = window.fault; t < lastEnd; t += 100) {
      const within = (o: Outcome) => o.end >= t && o.end < t + 100;
      if (failures.some(within) && !writes.some((o) => ok(o) && within(o))) unavailableS += 0.1;
    }
    if (failures.length) {
      const last = Math.max(...failures.map((o) => o.start));
      const success = writes.filter((o) => ok(o) && o.start > last).sort((a, b) => a.end - b.end)[0];
      servedAgain = success?.end ?? Infinity;
      recoveryS = success ? Math.max(0, success.end - window.healed) / 1000 : undefined;
    } else {
      servedAgain = window.fault;
      recoveryS = 0;
    }
  }
  const ms = (list: Outcome[]) =>
    percentile(
      list.map((o) => o.end - o.start),
      99,
    );
  const p99 = window
    ? {
        before: ms(outcomes.filter((o) => o.start < window.fault)),
        during: ms(outcomes.filter((o) => o.start >= window.fault && o.start < Math.max(servedAgain, window.healed))),
        after: ms(outcomes.filter((o) => o.start >= Math.max(servedAgain, window.healed))),
      }
    : { during: ms(outcomes) };
  return { statuses, errors, cutOff, overBound, slowest, unavailableS, recoveryS, p99 };
}
