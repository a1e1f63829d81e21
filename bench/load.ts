/**
 * Drives one scenario on one instance with autocannon for some seconds and
 * measures it: req/s, latency, the instance's CPU per request and
 * PostgreSQL's, the edge's cache answers, and the background requests sent beside it.
 */
import autocannon, { type Client as LoadClient, type Request as LoadRequest } from 'autocannon';
import { setTimeout as sleep } from 'node:timers/promises';
import { childCpuSeconds, postgresCpu, postgresCpuSince } from './processes.js';
import type { Background, Sample, Scenario } from './report.js';
import { randomId, type Context } from './scenarios.js';

export const CONNECTIONS = 32;

function loadRequests(s: Scenario<Context>, ctx: Context): LoadRequest[] {
  if (!s.randomId && !s.body && !s.authenticated) return [{ method: s.method, path: s.path(ctx, 0) }];
  const range = s.randomId?.(ctx);
  let next = 0;
  return [
    {
      method: s.method,
      path: s.path(ctx, 0),
      setupRequest: (req) => {
        // Writes go round the logged-in users (the peer's too, as authorId).
        const user = (next += 1) % ctx.userIds.length;
        const path = s.path(ctx, user);
        const headers: Record<string, string> = {};
        if (s.body) headers['content-type'] = 'application/json';
        if (s.authenticated) headers.authorization = `Bearer ${ctx.tokens[user]!}`;
        return {
          ...req,
          path: range ? path.replace(':id', String(randomId(range))) : path,
          headers,
          body: s.body?.(ctx, user),
        };
      },
    },
  ];
}

/**
 * Sends the background requests at their fixed rate until `until` resolves,
 * each without waiting for the previous one (a slow answer does not lower the rate).
 */
async function background(
  b: Background<Context>,
  ctx: Context,
  url: string,
  until: Promise<unknown>,
): Promise<NonNullable<Sample['background']>> {
  const statusCodes: Record<string, number> = {};
  let unexpected = 0;
  const pending: Promise<void>[] = [];
  const send = async () => {
    const { method, path, headers, body } = b.request(ctx);
    let status = 'error';
    try {
      const res = await fetch(`${url}${path}`, { method, headers, body, signal: AbortSignal.timeout(30_000) });
      await res.arrayBuffer();
      status = String(res.status);
    } catch {
      // counted as "error"
    }
    statusCodes[status] = (statusCodes[status] ?? 0) + 1;
    if (status !== String(b.expect)) unexpected += 1;
  };
  const started = performance.now();
  let done = false;
  const stop = () => {
    done = true;
  };
  until.then(stop, stop);
  for (let k = 0; !done; k++) {
    pending.push(send());
    // Scheduled from the start, so timer lateness does not accumulate.
    await sleep(Math.max(0, started + ((k + 1) * 1000) / b.perSecond - performance.now()));
  }
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(pending);
  if (pending.length === 0) throw new Error(`${b.title}: no background request was sent`);
  return { perSecond: pending.length / seconds, statusCodes, unexpected };
}

/** Counts the edge's answers by their `X-Cache-Status` on autocannon's connections. */
function countCacheStatus(edge: Sample['edge']) {
  return (client: LoadClient) => {
    client.on('headers', ({ headers }) => {
      for (let k = 0; k < headers.length; k += 2) {
        if (String(headers[k]).toLowerCase() !== 'x-cache-status') continue;
        const status = String(headers[k + 1]);
        edge[status] = (edge[status] ?? 0) + 1;
      }
    });
  };
}

/**
 * Waits until no statement runs on the bench databases: a request the load
 * generator gave up on at the end of a scenario (the peer's COUNT(*) takes
 * seconds) keeps PostgreSQL busy, and would be counted against the next one.
 */
async function settle(ctx: Context): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const { rows } = await ctx.monitor.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = ANY($1) AND state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      [ctx.databases],
    );
    if (rows[0]!.n === 0) return;
    await sleep(50);
  }
}

/**
 * Bytes of WAL the whole cluster has written so far. Per write, a figure the
 * machine's speed does not move (CPU per request does, by tens of percent on this VM).
 */
async function walPosition(monitor: Context['monitor']): Promise<number> {
  const { rows } = await monitor.query<{ b: string }>(`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS b`);
  return Number(rows[0]!.b);
}

/**
 * `s` on its instance, or on `target` (a variant's instance); the requests
 * read the target's own session when it has one (log-ins and posts on its database).
 * The scenario's `prepare` runs first, outside the measured window.
 */
export async function drive(
  s: Scenario<Context>,
  main: Context,
  seconds: number,
  target = main[s.on],
): Promise<Sample> {
  if (!target) throw new Error(`${s.id}: no ${s.on} running`);
  const session = main.sessions.get(target);
  const ctx = session ? { ...main, ...session } : main;
  await s.prepare?.(ctx, target.url, seconds);
  await settle(main);
  const edge: Sample['edge'] = {};
  const cpu0 = childCpuSeconds(target);
  const db0 = postgresCpu();
  const wal0 = await walPosition(main.monitor);
  const load = autocannon({
    url: target.url,
    connections: s.connections ?? CONNECTIONS,
    duration: seconds,
    pipelining: 1,
    timeout: 30,
    requests: loadRequests(s, ctx),
    // Only the edge has a cache: the others' loads stay as lean as before.
    ...(target === main.edge ? { setupClient: countCacheStatus(edge) } : {}),
  });
  const errorKinds: Record<string, number> = {};
  load.on('reqError', (error) => {
    const kind = error.code ?? error.message;
    errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
  });
  const writes = s.background ? background(s.background, ctx, target.url, load) : undefined;
  const result = await load;
  const sent = await writes;
  const cpu = childCpuSeconds(target) - cpu0;
  const db = postgresCpuSince(db0);
  const wal = (await walPosition(main.monitor)) - wal0;
  const requests = result.requests.total;
  const statusCodes: Record<string, number> = {};
  for (const [code, { count }] of Object.entries(result.statusCodeStats)) statusCodes[code] = count;
  return {
    rps: requests / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests,
    // autocannon's errors count its timeouts too.
    errors: result.errors,
    errorKinds,
    non2xx: result.non2xx,
    statusCodes,
    cpuMsPerRequest: requests ? (cpu * 1000) / requests : 0,
    dbCpuMsPerRequest: requests ? (db * 1000) / requests : 0,
    walBytesPerRequest: requests ? wal / requests : 0,
    edge,
    background: sent,
  };
}
