/**
 * SIGTERM under load against a real server process (issue 9): `node --import
 * tsx src/server.ts` (what `npm start` runs, minus the npm wrapper so the
 * signal reaches the server itself) on a free port, with DATABASE_URL set to a
 * throwaway database of the test server.
 *
 * Requests are made to be in flight for certain, not by timing: the test holds
 * a row lock on a post, so PATCHes of it wait inside the server until the test
 * lets go. Then SIGTERM. The contract of a graceful stop:
 * - new connections are refused (ECONNREFUSED) while the in-flight requests
 *   are still running;
 * - a request arriving on a connection that was already open is turned away by
 *   the one error handler (503), not with Fastify's own closing body;
 * - every in-flight request completes with its real answer once the lock goes,
 *   and with `Connection: close`, so no keep-alive connection outlives it;
 * - the process exits 0 by itself, well within close-with-grace's 10 s delay
 *   (after which it would exit 1).
 * Meanwhile a steady load of reads and writes gets only complete answers or no
 * connection, never a 500 or a connection cut mid-answer, and exactly the writes
 * acknowledged with 201 are stored.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { expectContractResponse, type AnyResponse } from '../helpers/contract.js';
import { accepts, freePort, waitUntil } from '../helpers/processes.js';

let db: TestDatabase;
let port: number;
let server: ChildProcess;
let output = '';
let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

beforeAll(async () => {
  db = await createTestDatabase();
  port = await freePort();
  // Only what the server needs: nothing from this process (REDIS_URL, NODE_OPTIONS...) leaks in.
  const env = {
    PATH: process.env.PATH,
    DATABASE_URL: db.url,
    HOST: '127.0.0.1',
    PORT: String(port),
    LOG_LEVEL: 'info',
    RATE_LIMIT_MAX: '1000000',
    RATE_LIMIT_AUTH_MAX: '1000000',
  };
  server = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  server.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  server.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  await waitUntil(
    'the server answers',
    async () => (await request('GET', '/health/ready').catch(() => undefined))?.statusCode === 200,
    400,
  );
});
afterAll(async () => {
  if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
  await db?.drop();
});

interface Reply extends AnyResponse {
  json(): any;
}

/** One request on its own connection (no keep-alive), or on the given agent's. */
function request(
  method: string,
  path: string,
  options: { body?: object; token?: string; agent?: http.Agent } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: options.agent ?? false,
        headers: {
          ...(payload !== undefined && {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(payload),
          }),
          ...(options.token && { authorization: `Bearer ${options.token}` }),
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () =>
          resolve({
            statusCode: res.statusCode!,
            headers: res.headers as Reply['headers'],
            body,
            json: () => JSON.parse(body),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

it('finishes in-flight requests, refuses new connections, answers late requests with the error body, exits 0', async () => {
  // A user, a token, a post to fight over.
  const password = 'shutdown-password';
  expect(
    (await request('POST', '/users', { body: { name: 'Sig', email: 'sig@example.com', password } })).statusCode,
  ).toBe(201);
  const token = (await request('POST', '/tokens', { body: { email: 'sig@example.com', password } })).json()
    .token as string;
  const postId = (await request('POST', '/posts', { token, body: { title: 'contended', body: 'b' } })).json()
    .id as number;

  // The test's own connection holds the post's row lock.
  const locker = new pg.Client({ connectionString: db.url });
  locker.on('error', () => undefined); // ended by the database's drop if the test fails half-way
  await locker.connect();
  await locker.query('BEGIN');
  await locker.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [postId]);

  // In flight: PATCHes on keep-alive connections (as a browser or an SDK would send them), waiting on the lock.
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 8 });
  const settled: boolean[] = [];
  const inFlight = Array.from({ length: 4 }, (_, i) =>
    request('PATCH', `/posts/${postId}`, { token, agent: keepAlive, body: { title: `in flight ${i}` } }).finally(
      () => (settled[i] = true),
    ),
  );
  // And one more on a raw connection, so that a second request can follow it later on the same socket.
  const raw = connect(port, '127.0.0.1');
  let rawReceived = '';
  raw.setEncoding('utf8').on('data', (chunk: string) => (rawReceived += chunk));
  await new Promise((resolve) => raw.once('connect', resolve));
  const patch = JSON.stringify({ title: 'raw in flight' });
  raw.write(
    `PATCH /posts/${postId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(patch)}\r\n\r\n${patch}`,
  );

  await waitUntil('five PATCHes wait on the row lock', async () => {
    // Another session: within the locker's transaction pg_stat_activity would be a frozen snapshot.
    const observer = new pg.Client({ connectionString: db.url });
    await observer.connect();
    try {
      const { rows } = await observer.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'posts-api' AND wait_event_type = 'Lock'",
      );
      return rows[0]!.n === 5;
    } finally {
      await observer.end();
    }
  });

  // A steady load on fresh connections, before, during and after the signal.
  let loading = true;
  interface LoadOutcome {
    title?: string;
    startedAt: number;
    status?: number;
    error?: string;
  }
  const load: LoadOutcome[] = [];
  let serial = 0;
  const loaders = [0, 1, 2].map(async (i) => {
    while (loading) {
      const title = i === 0 ? `load ${(serial += 1)}` : undefined;
      const startedAt = performance.now();
      const outcome: LoadOutcome = await (
        title ? request('POST', '/posts', { token, body: { title, body: 'b' } }) : request('GET', '/posts?perPage=2')
      )
        .then((res) => {
          expectContractResponse(res, { allow5xx: [503] });
          return { title, startedAt, status: res.statusCode };
        })
        .catch((error: NodeJS.ErrnoException) => ({ title, startedAt, error: error.code ?? error.message }));
      load.push(outcome);
      if (outcome.error !== undefined) await sleep(20);
    }
  });
  await waitUntil('the load is flowing', () => load.filter((o) => o.status !== undefined).length >= 6);

  server.kill('SIGTERM');
  await waitUntil('new connections are refused', async () => !(await accepts(port)));
  const refusedSince = performance.now();
  const refused = await request('GET', '/health/live').catch((error: NodeJS.ErrnoException) => error.code);
  expect(refused).toBe('ECONNREFUSED');
  // Still running: nothing in flight was cut off by the signal.
  expect(settled.filter(Boolean)).toEqual([]);
  expect(server.exitCode).toBeNull();

  // A request arriving after the signal on a connection that was open all along (pipelined
  // behind the blocked PATCH): the server handles it with the contract's 503.
  raw.write('GET /posts HTTP/1.1\r\nHost: x\r\nX-Request-Id: late-request\r\n\r\n');
  await waitUntil('the late request is turned away', () =>
    /"requestId":"late-request"[^\n]*the server is shutting down/.test(output),
  );

  // Let go: every in-flight request now completes, with its real answer.
  await locker.query('COMMIT');
  await locker.end();
  const answers = await Promise.all(inFlight);
  for (const res of answers) {
    expect(res.statusCode).toBe(200);
    expect(res.json().title).toMatch(/^in flight \d$/);
    // Their connections end with them, instead of idling in keep-alive past the grace period.
    expect(res.headers.connection).toBe('close');
  }

  const { code, signal } = await exited;
  expect({ code, signal }).toEqual({ code: 0, signal: null });
  loading = false;
  await Promise.all(loaders);
  keepAlive.destroy();

  // The raw connection got its PATCH answered, with Connection: close. That ends the connection,
  // so the 503 queued behind it is never written (RFC 9112 §9.6: the client retries it elsewhere);
  // had it been, it would be the contract's body, never Fastify's own closing body.
  const responses = rawReceived.split(/(?=HTTP\/1\.1 )/);
  expect(responses[0]).toMatch(/^HTTP\/1\.1 200 [^]*\r\nConnection: close\r\n/i);
  for (const extra of responses.slice(1)) {
    const [head, body] = extra.split('\r\n\r\n') as [string, string];
    const headers = Object.fromEntries(
      head
        .split('\r\n')
        .slice(1)
        .map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
    );
    expectContractResponse({ statusCode: Number(head.split(' ')[1]), headers, body }, { allow5xx: [503] });
  }
  expect(output).not.toMatch(/refusing to accept new requests/);
  raw.destroy();

  // The load saw complete answers (successes, or the contract's 503 while closing) or no connection:
  // refused once the listener was closed; reset only for a connection accepted just before
  // and closed unread (Node closes idle connections at close()), which processed nothing.
  for (const outcome of load) {
    if (outcome.status !== undefined) expect([200, 201, 503]).toContain(outcome.status);
    else if (outcome.startedAt > refusedSince) expect(outcome.error).toBe('ECONNREFUSED');
    else expect(['ECONNREFUSED', 'ECONNRESET']).toContain(outcome.error);
  }
  expect(load.some((o) => o.error === 'ECONNREFUSED')).toBe(true);
  // Every acknowledged write is stored, and nothing else: a write that got no 201 left no trace.
  const check = new pg.Client({ connectionString: db.url });
  await check.connect();
  const stored = (await check.query<{ title: string }>("SELECT title FROM posts WHERE title LIKE 'load %'")).rows.map(
    (r) => r.title,
  );
  await check.end();
  const writes = load.filter((o) => o.title !== undefined);
  expect(stored.sort()).toEqual(
    writes
      .filter((o) => o.status === 201)
      .map((o) => o.title!)
      .sort(),
  );
  expect(output).toMatch(/"msg":"shutting down"/);
  // No bug on the way down: no 500, no unhandled error, nothing fatal.
  expect(output).not.toMatch(/"status":500|unhandled error|"level":60/);
});
