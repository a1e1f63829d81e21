/**
 * Prometheus metrics (docs/operations.md, "Metrics"): scraped from their own
 * port after known requests; route templates, never raw ids; the API's port
 * has no /metrics. Traces are in tracing.test.ts (the SDK is process-wide).
 */
import type { FastifyInstance } from 'fastify';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { createPost, signUp, startInstance, type SignedUp } from '../helpers/factories.js';
import { startReceiver, type Receiver } from '../helpers/receivers.js';
import { waitUntil } from '../helpers/processes.js';

let db: TestDatabase;
let app: FastifyInstance;
let port: number;
let ann: SignedUp;
let hooks: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startInstance(db, {
    RATE_LIMIT_AUTH_MAX: '3',
    PG_POOL_MAX: '7',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE: 'true',
    WEBHOOK_POLL_MS: '25',
  });
  port = await app.metrics.serve('127.0.0.1', 0);
  hooks = await startReceiver(() => 204);
});
afterAll(async () => {
  await app?.close();
  await hooks?.close();
  await db?.drop();
});

async function scrape(): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return res.text();
}

/** The value of one sample, e.g. `name{a="b"}`, or undefined when it is not there. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

// Debian's prometheus package has it (.ci/run installs it); found on PATH.
const PROMTOOL = spawnSync('promtool', ['--version']).error === undefined;

describe('metrics', () => {
  it('every label value a counter knows is a series at 0 before its first event: rate() reads 0, not nothing', async () => {
    // An instance of its own: nothing has happened to it yet.
    const fresh = await startInstance(db);
    try {
      const text = await (await fetch(`http://127.0.0.1:${await fresh.metrics.serve('127.0.0.1', 0)}/metrics`)).text();
      for (const series of [
        'posts_api_rate_limited_total{limit="default"}',
        'posts_api_rate_limited_total{limit="auth"}',
        'posts_api_webhook_attempts_total{result="delivered"}',
        'posts_api_webhook_attempts_total{result="failed"}',
        'posts_api_webhook_attempts_total{result="given_up"}',
      ])
        expect(sample(text, series), series).toBe(0);
    } finally {
      await fresh.close();
    }
  });

  it('counts requests by method, route template and status class, 429s by limit; no raw id in any label', async () => {
    ann = await signUp(app, { password: 'metrics-password' }); // POST /users, POST /tokens: 2 of the auth budget of 3
    const post = await createPost(app, ann);
    for (let i = 0; i < 3; i++) expect((await app.inject({ url: `/posts/${post.id}` })).statusCode).toBe(200);
    expect((await app.inject({ url: '/posts/987654321' })).statusCode).toBe(404);
    expect((await app.inject({ url: '/no/such/path/42' })).statusCode).toBe(404);
    const login = {
      method: 'POST' as const,
      url: '/tokens',
      payload: { email: ann.user.email, password: 'metrics-password' },
    };
    expect((await app.inject(login)).statusCode).toBe(201);
    expect((await app.inject(login)).statusCode).toBe(429);

    const text = await scrape();
    const count = (method: string, route: string, status: string) =>
      sample(text, `http_request_duration_seconds_count{method="${method}",route="${route}",status_class="${status}"}`);
    expect(count('GET', '/posts/:postId', '2xx')).toBe(3);
    expect(count('GET', '/posts/:postId', '4xx')).toBe(1);
    expect(count('GET', 'unmatched', '4xx')).toBe(1);
    expect(count('POST', '/posts', '2xx')).toBe(1);
    expect(count('POST', '/tokens', '2xx')).toBe(2);
    expect(count('POST', '/tokens', '4xx')).toBe(1);
    expect(
      sample(
        text,
        'http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/posts/:postId",status_class="2xx"}',
      ),
    ).toBe(3);
    expect(sample(text, 'posts_api_rate_limited_total{limit="auth"}')).toBe(1);
    const routes = new Set([...text.matchAll(/route="([^"]*)"/g)].map((m) => m[1]));
    expect([...routes].sort()).toEqual(['/posts', '/posts/:postId', '/tokens', '/users', 'unmatched']);
  });

  it('the pool, the event log, the streams and the webhook backlog, read at scrape time; the process defaults', async () => {
    const text = await scrape();
    expect(sample(text, 'posts_api_db_pool_connections{state="max"}')).toBe(7);
    expect(sample(text, 'posts_api_db_pool_connections{state="open"}')).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'posts_api_db_pool_waiting')).toBe(0);
    expect(sample(text, 'posts_api_db_statement_timeouts_total')).toBe(0);
    expect(sample(text, 'posts_api_event_streams_open')).toBe(0);
    expect(sample(text, 'posts_api_event_streams_refused_total')).toBe(0);
    expect(sample(text, 'posts_api_webhook_deliveries_due')).toBe(0);
    expect(sample(text, 'posts_api_webhook_oldest_due_seconds')).toBe(0);
    expect(sample(text, 'posts_api_events_unnumbered')).toBeGreaterThanOrEqual(0);
    const { rows } = await app.db.query<{ head: number }>('SELECT coalesce(max(id), 0)::float8 AS head FROM events');
    expect(sample(text, 'posts_api_events_numbered_total')).toBe(rows[0]!.head);
    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_p99_seconds',
    ])
      expect(sample(text, name)).toBeGreaterThanOrEqual(0);
    expect(text).toContain('nodejs_gc_duration_seconds');
  });

  it('webhook attempts by result', async () => {
    const created = await app.inject({
      method: 'POST',
      url: '/webhooks',
      headers: ann.auth,
      payload: { url: hooks.url },
    });
    expect(created.statusCode, created.body).toBe(201);
    await createPost(app, ann);
    await hooks.waitFor(1);
    await waitUntil(
      'the attempt is counted',
      async () => sample(await scrape(), 'posts_api_webhook_attempts_total{result="delivered"}') === 1,
    );
  });

  it.skipIf(!PROMTOOL)('promtool check metrics finds nothing to fix (skipped: no promtool)', async () => {
    const checked = spawnSync('promtool', ['check', 'metrics'], { input: await scrape(), encoding: 'utf8' });
    expect(checked.stdout + checked.stderr).toBe('');
    expect(checked.status).toBe(0);
  });

  it('the API port has no /metrics: the contract 404', async () => {
    const res = await app.inject({ url: '/metrics' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'not_found', message: 'no route GET /metrics', requestId: expect.any(String) });
  });

  it('only GET /metrics on the metrics port', async () => {
    expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(404);
    expect((await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })).status).toBe(404);
  });

  it('METRICS_PORT=0 turns them off: no collection at all', async () => {
    expect(loadConfig({ METRICS_PORT: '0' }).metrics).toBeNull();
    expect(loadConfig({}).metrics).toEqual({ host: '127.0.0.1', port: 9464 });
    const off = await startInstance(db, { METRICS_PORT: '0' });
    expect(off.hasDecorator('metrics')).toBe(false);
    await off.close();
  });
});

describe('failures counted', () => {
  let other: FastifyInstance;
  let otherPort: number;
  afterAll(async () => {
    await other?.close();
  });

  it('a statement timeout; a stream refused at MAX_STREAMS (not a stream served)', async () => {
    // 1 s, and the post made elsewhere: on a loaded machine only the lock wait may time out, or the count is off.
    other = await startInstance(db, { PG_STATEMENT_TIMEOUT_MS: '1000', MAX_STREAMS: '1' });
    otherPort = await other.metrics.serve('127.0.0.1', 0);
    await other.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${(other.server.address() as { port: number }).port}`;
    const read = async (series: string) =>
      sample(await (await fetch(`http://127.0.0.1:${otherPort}/metrics`)).text(), series);

    const post = await createPost(app, ann);
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [post.id]);
      const res = await other.inject({
        method: 'PATCH',
        url: `/posts/${post.id}`,
        headers: ann.auth,
        payload: { title: 'new' },
      });
      expect(res.statusCode).toBe(503);
    } finally {
      await locker.end();
    }
    expect(await read('posts_api_db_statement_timeouts_total')).toBe(1);

    // node:http, not fetch: a fetch() stream aborted leaves its connection open until the request timeout.
    const first = http.get(`${base}/events/stream`, { agent: false });
    const open = await new Promise<http.IncomingMessage>((resolve) => first.once('response', resolve));
    expect(open.statusCode).toBe(200);
    expect(await read('posts_api_event_streams_open')).toBe(1);
    const refused = await fetch(`${base}/events/stream`);
    expect(refused.status).toBe(503);
    await refused.body?.cancel();
    expect(await read('posts_api_event_streams_refused_total')).toBe(1);
    first.destroy();
    await waitUntil('the stream is closed', async () => (await read('posts_api_event_streams_open')) === 0);
    expect(await read('posts_api_event_streams_refused_total')).toBe(1);
  });
});
