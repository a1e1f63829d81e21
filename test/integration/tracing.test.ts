/**
 * Tracing as an operator turns it on: `src/server.ts` in a process of its own
 * (the OpenTelemetry SDK is process-wide) with OTEL_EXPORTER_OTLP_ENDPOINT
 * pointing at an OTLP/HTTP receiver here; its start-up line says where spans go.
 * A request's caller's traceparent is continued, its spans (HTTP, named by route
 * template, and pg, named by what each query does) reach the receiver, and its
 * log line carries the trace id. The same process serves its metrics on
 * METRICS_PORT and none on its API port, nor over OTLP unless asked. A webhook
 * delivery's span links to the span of the write that made its event: every
 * traced write (a single statement, group-committed or not, and a transaction)
 * stores its trace context in the events it makes. A collector refusing every
 * export is logged once.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { freePort, waitUntil } from '../helpers/processes.js';
import { startReceiver, type Receiver } from '../helpers/receivers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

let db: TestDatabase;
let collector: Receiver;
let endpoint: Receiver;
const servers: ChildProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  collector = await startReceiver(() => 200);
  endpoint = await startReceiver(() => 204);
});
afterAll(async () => {
  for (const server of servers) if (server.exitCode === null) server.kill('SIGKILL');
  await collector?.close();
  await endpoint?.close();
  await db?.drop();
});

interface Started {
  server: ChildProcess;
  port: number;
  metricsPort: number;
  /** What it has printed so far, stdout and stderr. */
  output(): string;
}

/** `src/server.ts` tracing to `receiver`, once it serves. */
async function startServer(receiver: Receiver, env: Record<string, string> = {}): Promise<Started> {
  const [port, metricsPort] = [await freePort(), await freePort()];
  const server = spawn(process.execPath, ['--import', TSX, join(ROOT, 'src/server.ts')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: db.url,
      PORT: String(port),
      METRICS_PORT: String(metricsPort),
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url.replace(/\/hook$/, ''),
      OTEL_BSP_SCHEDULE_DELAY: '100',
      // OTLP metrics, when sent, are sent within the test, not once a minute.
      OTEL_METRIC_EXPORT_INTERVAL: '100',
      OTEL_SERVICE_NAME: 'posts-api-test',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE: 'true',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  servers.push(server);
  let output = '';
  server.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  server.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await waitUntil(
    'the server has started',
    () => output.includes('"msg":"metrics on ') || server.exitCode !== null,
    600,
  );
  expect(output).toContain(`"msg":"metrics on http://127.0.0.1:${metricsPort}/metrics"`);
  return { server, port, metricsPort, output: () => output };
}

async function stop(server: ChildProcess): Promise<void> {
  server.kill('SIGTERM');
  await waitUntil('the server has stopped', () => server.exitCode !== null, 400);
  expect(server.exitCode).toBe(0);
}

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: { key: string; value: { stringValue?: string } }[];
  links?: { traceId: string; spanId: string }[];
}
const spans = (): Span[] =>
  collector.received
    .filter((r) => r.url === '/v1/traces')
    .flatMap((r) =>
      (JSON.parse(r.body) as { resourceSpans: { scopeSpans: { spans: Span[] }[] }[] }).resourceSpans.flatMap((rs) =>
        rs.scopeSpans.flatMap((ss) => ss.spans),
      ),
    );

it('continues the caller trace: spans at the OTLP receiver, pg ones named by what they do, the trace id in the log line; metrics on their own port, not over OTLP; a webhook delivery links to its write', async () => {
  const { server, port, metricsPort, output } = await startServer(collector);
  // Where it traces to, in the line that says what it connects to.
  expect(output()).toMatch(/"msg":"listening on [^"]*; tracing http:\/\/127\.0\.0\.1:\d+\/v1\/traces"/);

  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const res = await fetch(`http://127.0.0.1:${port}/posts/1`, {
    headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
  });
  expect(res.status).toBe(404);

  // The request's own span ends after its answer, and may be exported in a later batch than its queries'.
  await waitUntil(
    'the spans have arrived',
    () =>
      spans().some((s) => s.traceId === traceId && /pg|SELECT/i.test(s.name)) &&
      spans().some((s) => s.traceId === traceId && s.parentSpanId === '00f067aa0ba902b7'),
    400,
  );
  const traced = spans().filter((s) => s.traceId === traceId);
  const root = traced.find((s) => s.parentSpanId === '00f067aa0ba902b7');
  expect(root?.name).toBe('GET /posts/:postId');
  expect(root?.attributes).toContainEqual({ key: 'http.route', value: { stringValue: '/posts/:postId' } });
  expect(collector.received.find((r) => r.url === '/v1/traces')!.headers['content-type']).toBe('application/json');

  const line = output()
    .split('\n')
    .find((l) => l.includes('"msg":"request done"'));
  expect(JSON.parse(line!)).toMatchObject({ traceId, route: '/posts/:postId', status: 404 });

  expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(404);
  const metrics = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
  expect(metrics.status).toBe(200);
  expect(await metrics.text()).toContain(
    'http_request_duration_seconds_count{method="GET",route="/posts/:postId",status_class="4xx"} 1',
  );

  // A webhook delivery is a span of its own trace, linked to the span of the write that made its event.
  const api = (path: string, body: object, headers: Record<string, string> = {}) =>
    fetch(`http://127.0.0.1:${port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const user = { name: 'Ann', email: 'ann@example.com', password: 'password-1' };
  const signer = '9c3e5a4f1b2d4e6f8a0b1c2d3e4f5a6b';
  const signedUp = await api('/users', user, { traceparent: `00-${signer}-a1b2c3d4e5f60718-01` });
  expect(signedUp.status).toBe(201);
  const { id: userId } = (await signedUp.json()) as { id: number };
  const { token } = (await (await api('/tokens', { email: user.email, password: user.password })).json()) as {
    token: string;
  };
  const auth = { authorization: `Bearer ${token}` };
  expect((await api('/webhooks', { url: endpoint.url }, auth)).status).toBe(201);
  const writer = '0af7651916cd43dd8448eb211c80319c';
  const created = await api(
    '/posts',
    { title: 'Traced', body: 'text' },
    { ...auth, traceparent: `00-${writer}-b7ad6b7169203331-01` },
  );
  expect(created.status).toBe(201);
  await endpoint.waitFor(1, 20_000);
  await waitUntil('the delivery span has arrived', () => spans().some((s) => s.name === 'webhook delivery'), 400);
  const delivery = spans().find((s) => s.name === 'webhook delivery')!;
  expect(delivery.traceId).not.toBe(writer);
  expect(delivery.links).toHaveLength(1);
  expect(delivery.links![0]!.traceId).toBe(writer);
  // The linked span is one of the POST's own (its group commit), not the caller's.
  expect(spans().some((s) => s.traceId === writer && s.spanId === delivery.links![0]!.spanId)).toBe(true);

  // A PATCH (one group-committed UPDATE) and a DELETE (a transaction) of the same post, each in a trace of its own.
  const { id: postId } = (await created.json()) as { id: number };
  const change = async (method: string, traceId: string, body?: object) => {
    const res = await fetch(`http://127.0.0.1:${port}/posts/${postId}`, {
      method,
      headers: { ...auth, traceparent: `00-${traceId}-c4d5e6f708192a3b-01`, 'content-type': 'application/json' },
      body: body && JSON.stringify(body),
    });
    return res.status;
  };
  const patcher = '1e2d3c4b5a6978870f1e2d3c4b5a6978';
  const deleter = '7a6b5c4d3e2f10011a2b3c4d5e6f7081';
  expect(await change('PATCH', patcher, { title: 'Traced again' })).toBe(200);
  expect(await change('DELETE', deleter)).toBe(204);

  // Each event stores the trace context of a span of its own write's trace, numbered yet or not.
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const stored = async (type: string, resourceId: number) => {
    const { rows } = await sql.query<{ traceparent: string | null }>(
      `SELECT traceparent FROM events WHERE type = $1 AND resource_id = $2
       UNION ALL SELECT traceparent FROM events_pending WHERE type = $1 AND resource_id = $2`,
      [type, resourceId],
    );
    expect(rows).toHaveLength(1);
    return rows[0]!.traceparent;
  };
  const written = [
    ['user.created', userId, signer],
    ['post.created', postId, writer],
    ['post.updated', postId, patcher],
    ['post.deleted', postId, deleter],
  ] as const;
  const spanIds: [traceId: string, spanId: string][] = [];
  for (const [type, resourceId, traceId] of written) {
    const traceparent = await stored(type, resourceId);
    const [, spanId] = new RegExp(`^00-${traceId}-([0-9a-f]{16})-01$`).exec(traceparent ?? '') ?? [];
    expect(spanId, `${type}: ${traceparent}`).toBeDefined();
    spanIds.push([traceId, spanId!]);
  }
  await sql.end();
  await waitUntil(
    'the writes spans have arrived',
    () => spanIds.every(([traceId, spanId]) => spans().some((s) => s.traceId === traceId && s.spanId === spanId)),
    400,
  );

  // Each query's span says what it did to which table, in each request's trace; none is named by a statement's digest.
  const names = (traceId: string) => spans().flatMap((s) => (s.traceId === traceId ? [s.name] : []));
  expect(names(traceId)).toContain('SELECT posts');
  expect(names(writer)).toContain('INSERT posts');
  expect(names(patcher)).toContain('UPDATE posts');
  expect(names(deleter)).toEqual(expect.arrayContaining(['BEGIN', 'SELECT posts', 'DELETE posts', 'COMMIT']));
  expect(spans().filter((s) => /posts_api_[0-9a-f]|^pg\.query/.test(s.name))).toEqual([]);
  const deleted = spans().find((s) => s.traceId === deleter && s.name === 'DELETE posts');
  expect(deleted?.attributes).toContainEqual({
    key: 'db.query.text',
    value: { stringValue: expect.stringMatching(/^DELETE FROM posts\b/) },
  });

  await stop(server);
  // Traces only: OTLP metrics are not asked for (OTEL_METRICS_EXPORTER), and the metrics port has them anyway.
  expect(new Set(collector.received.map((r) => r.url))).toEqual(new Set(['/v1/traces']));
}, 60_000);

it('sends OTLP metrics only when OTEL_METRICS_EXPORTER asks; a collector refusing every export is logged once', async () => {
  const refusing = await startReceiver(() => 404);
  try {
    const { server, port, output } = await startServer(refusing, { OTEL_METRICS_EXPORTER: 'otlp' });
    // One request after another, each with spans of its own to export: several exports, each refused.
    for (let i = 1; i <= 3; i++) {
      expect((await fetch(`http://127.0.0.1:${port}/posts/1`)).status).toBe(404);
      await waitUntil(`export ${i} refused`, () => refusing.received.filter((r) => r.url === '/v1/traces').length >= i);
    }
    await waitUntil('the metrics refused', () => refusing.received.some((r) => r.url === '/v1/metrics'));
    expect(refusing.received.find((r) => r.url === '/v1/metrics')!.headers['content-type']).toBe(
      'application/x-protobuf',
    );
    // Stopped with this request's spans not yet exported: the shutdown's last export is refused too, and the
    // service still exits 0 (it exited 1 when the load on CI's machine left spans for that last export).
    expect((await fetch(`http://127.0.0.1:${port}/posts/2`)).status).toBe(404);
    await stop(server);
    const said = output()
      .split('\n')
      .filter((line) => line.includes('export failed'));
    expect(said).toHaveLength(1);
    expect(JSON.parse(said[0]!)).toMatchObject({ level: 40, msg: expect.stringContaining('Not Found') });
  } finally {
    await refusing.close();
  }
}, 60_000);
