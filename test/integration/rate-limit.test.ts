/**
 * Rate limiting (docs/api.md §7): headers on every response, 429 with Retry-After
 * and the one error body, keying by user or IP, the stricter log-in/sign-up
 * budget, exemptions, one budget across instances sharing Redis, and failing
 * open while Redis is unreachable.
 *
 * Counters live in the machine's Redis under a namespace named after this
 * file's throwaway database, so parallel runs never share them; each test
 * uses its own client addresses so tests never share them either. Losing
 * Redis is tested on a private redis-server this file starts and kills.
 */
import { onTopology } from '../helpers/database.js';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCleanups, type LoggedApp } from '../helpers/cleanups.js';
import { checkAgainstDocument } from '../helpers/openapi-conformance.js';
import { useTestApp } from '../helpers/factories.js';

const SHARED_REDIS = process.env.TEST_REDIS_URL || 'redis://127.0.0.1:6379';
const WINDOW = 60;

// Users are created through an app with the default in-memory limits, so
// their sign-ups spend nothing the tests below count.
const setup = useTestApp();
const ann = setup.user();
const bob = setup.user();
const cleanups = useCleanups();

/** An instance on the shared Redis unless `env` says otherwise, closed after the test; `lines`: what it logged. */
async function build(env: Record<string, string>): Promise<LoggedApp> {
  const built = await cleanups.app(onTopology(setup.db.url), {
    REDIS_URL: SHARED_REDIS,
    RATE_LIMIT_WINDOW: String(WINDOW),
    ...env,
  });
  await checkAgainstDocument(built.app);
  return built;
}

type Response = Awaited<ReturnType<FastifyInstance['inject']>>;

function get(app: FastifyInstance, url: string, ip: string, headers: Record<string, string> = {}) {
  return app.inject({ method: 'GET', url, remoteAddress: ip, headers });
}

/** The trio of docs/api.md §7, and nothing of the later drafts' structured fields. */
function expectLimitHeaders(res: Response, max: number, remaining: number) {
  const reset = Number(res.headers['ratelimit-reset']);
  expect(Number.isInteger(reset) && reset >= 1 && reset <= WINDOW).toBe(true);
  expect(res.headers).toMatchObject({
    'ratelimit-limit': String(max),
    'ratelimit-remaining': String(remaining),
  });
  expect(res.headers['ratelimit-policy']).toBeUndefined();
  expect(res.headers.ratelimit).toBeUndefined();
}

function expectNoLimitHeaders(res: Response) {
  for (const name of ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']) {
    expect(res.headers[name]).toBeUndefined();
  }
}

function expectRateLimited(res: Response, max: number) {
  expect(res.statusCode).toBe(429);
  const retryAfter = res.headers['retry-after'];
  expect(retryAfter).toBe(res.headers['ratelimit-reset']);
  expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
  expect(res.json()).toEqual({
    error: 'rate_limited',
    message: `too many requests: ${max} per ${WINDOW} s allowed; try again in ${retryAfter} s`,
    requestId: res.headers['x-request-id'],
  });
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

describe('headers', () => {
  it('every counted response carries the trio: 200, 404, 405, 401, 422', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '50' });
    const ip = '10.1.0.1';

    const ok = await get(app, '/users?perPage=1', ip);
    expect(ok.statusCode).toBe(200);
    expectLimitHeaders(ok, 50, 49);

    const missing = await get(app, '/nope', ip);
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({
      error: 'not_found',
      message: 'no route GET /nope',
      requestId: missing.headers['x-request-id'],
    });
    expectLimitHeaders(missing, 50, 48);

    const unsupported = await app.inject({ method: 'DELETE', url: '/users', remoteAddress: ip });
    expect(unsupported.statusCode).toBe(405);
    expect(unsupported.json()).toEqual({
      error: 'method_not_allowed',
      message: `DELETE is not supported on /users; use ${unsupported.headers.allow}`,
      requestId: unsupported.headers['x-request-id'],
    });
    expectLimitHeaders(unsupported, 50, 47);

    const badToken = await get(app, '/users', ip, { authorization: 'Bearer not-a-real-token' });
    expect(badToken.statusCode).toBe(401);
    expect(badToken.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
    expect(badToken.json()).toEqual({
      error: 'unauthorized',
      message: 'the access token is malformed, unknown, expired or revoked',
      requestId: badToken.headers['x-request-id'],
    });
    expectLimitHeaders(badToken, 50, 46);

    const invalid = await get(app, '/users?perPage=0', ip);
    expect(invalid.statusCode).toBe(422);
    expect(invalid.json()).toEqual({
      error: 'validation',
      message: 'request is invalid',
      fieldErrors: { perPage: ['must be at least 1'] },
      requestId: invalid.headers['x-request-id'],
    });
    expectLimitHeaders(invalid, 50, 45);
  });
});

describe('429', () => {
  it('after max requests: Retry-After, the one error body, and it comes before 401, 404 and 422', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '3' });
    const ip = '10.1.0.2';
    for (const remaining of [2, 1, 0]) {
      const res = await get(app, '/users?perPage=1', ip);
      expect(res.statusCode).toBe(200);
      expectLimitHeaders(res, 3, remaining);
    }

    const limited = await get(app, '/users?perPage=1', ip);
    expectRateLimited(limited, 3);
    expectLimitHeaders(limited, 3, 0);

    expectRateLimited(await get(app, '/users', ip, { authorization: 'Bearer not-a-real-token' }), 3);
    expectRateLimited(await get(app, '/nope', ip), 3);
    expectRateLimited(await get(app, '/users?perPage=0', ip), 3);
  });

  it('also with the in-memory store (no REDIS_URL)', async () => {
    const { app } = await build({ REDIS_URL: '', RATE_LIMIT_MAX: '1' });
    const ok = await get(app, '/users?perPage=1', '10.1.0.3');
    expect(ok.statusCode).toBe(200);
    expectLimitHeaders(ok, 1, 0);
    expectRateLimited(await get(app, '/users?perPage=1', '10.1.0.3'), 1);
  });
});

describe('clients', () => {
  it('authenticated requests are keyed by user: two users and anonymous callers on one IP have separate budgets', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '2' });
    const ip = '10.1.0.4';
    for (const remaining of [1, 0]) expectLimitHeaders(await get(app, '/users/me', ip, ann.auth), 2, remaining);
    expectRateLimited(await get(app, '/users/me', ip, ann.auth), 2);

    const other = await get(app, '/users/me', ip, bob.auth);
    expect(other.statusCode).toBe(200);
    expectLimitHeaders(other, 2, 1);

    const anonymous = await get(app, '/users?perPage=1', ip);
    expect(anonymous.statusCode).toBe(200);
    expectLimitHeaders(anonymous, 2, 1);
  });

  it('with TRUST_PROXY=true each X-Forwarded-For client has its own budget', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '1', TRUST_PROXY: 'true' });
    const proxy = '10.1.0.5';
    expect((await get(app, '/users?perPage=1', proxy, { 'x-forwarded-for': '203.0.113.1' })).statusCode).toBe(200);
    expectRateLimited(await get(app, '/users?perPage=1', proxy, { 'x-forwarded-for': '203.0.113.1' }), 1);
    const second = await get(app, '/users?perPage=1', proxy, { 'x-forwarded-for': '203.0.113.2' });
    expect(second.statusCode).toBe(200);
    expectLimitHeaders(second, 1, 0);
  });

  it('with TRUST_PROXY=false forwarded headers are ignored: one budget per socket address', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '1', TRUST_PROXY: 'false' });
    const ip = '10.1.0.6';
    expect((await get(app, '/users?perPage=1', ip, { 'x-forwarded-for': '203.0.113.3' })).statusCode).toBe(200);
    expectRateLimited(await get(app, '/users?perPage=1', ip, { 'x-forwarded-for': '203.0.113.4' }), 1);
  });
});

describe('log-in and sign-up', () => {
  it('POST /tokens and POST /users share the stricter auth budget, apart from the default one', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '100', RATE_LIMIT_AUTH_MAX: '2' });
    const ip = '10.1.0.7';
    const logIn = (password: string) =>
      app.inject({ method: 'POST', url: '/tokens', remoteAddress: ip, payload: { email: ann.user.email, password } });

    const wrong = await logIn('wrong-password');
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json()).toEqual({
      error: 'unauthorized',
      message: 'e-mail or password is wrong',
      requestId: wrong.headers['x-request-id'],
    });
    expectLimitHeaders(wrong, 2, 1);

    const right = await logIn(ann.password);
    expect(right.statusCode).toBe(201);
    expectLimitHeaders(right, 2, 0);

    const limited = await logIn(ann.password);
    expectRateLimited(limited, 2);
    expectLimitHeaders(limited, 2, 0);
    expectRateLimited(
      await app.inject({
        method: 'POST',
        url: '/users',
        remoteAddress: ip,
        payload: { name: 'Late', email: 'late@example.com', password: 'late-password' },
      }),
      2,
    );

    // The general budget of the same client is untouched.
    const read = await get(app, '/users?perPage=1', ip);
    expect(read.statusCode).toBe(200);
    expectLimitHeaders(read, 100, 99);
  });
});

describe('exemptions', () => {
  it('health and the docs page are neither counted nor given headers', async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '1' });
    const ip = '10.1.0.8';
    for (const url of ['/health/live', '/health/ready', '/health/live', '/docs', '/docs/static/index.css']) {
      const res = await get(app, url, ip);
      expect(res.statusCode).toBe(200);
      expectNoLimitHeaders(res);
    }
    const counted = await get(app, '/users?perPage=1', ip);
    expect(counted.statusCode).toBe(200);
    expectLimitHeaders(counted, 1, 0);
  });
});

describe('the OpenAPI document', () => {
  it("spends the budget like any request, at /openapi.json and at the docs page's /docs/json", async () => {
    const { app } = await build({ RATE_LIMIT_MAX: '2' });
    const ip = '10.1.0.99';
    const first = await get(app, '/openapi.json', ip);
    expect(first.statusCode).toBe(200);
    expectLimitHeaders(first, 2, 1);
    const second = await get(app, '/docs/json', ip);
    expect(second.statusCode).toBe(200);
    expectLimitHeaders(second, 2, 0);
    const refused = await get(app, '/openapi.json', ip);
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error).toBe('rate_limited');
  });
});

describe('Redis', () => {
  it('two instances sharing one Redis admit exactly max requests in total', async () => {
    const [{ app: one }, { app: two }] = await Promise.all([
      build({ RATE_LIMIT_MAX: '10' }),
      build({ RATE_LIMIT_MAX: '10' }),
    ]);
    const ip = '10.1.0.9';
    const responses = await Promise.all(
      Array.from({ length: 15 }, () => [get(one, '/users?perPage=1', ip), get(two, '/users?perPage=1', ip)]).flat(),
    );
    const statuses = responses.map((r) => r.statusCode);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(20);
  });

  it('unreachable at start-up: requests are still served, unlimited, with a full budget shown; one warning', async () => {
    const { app, lines } = await build({
      REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
      RATE_LIMIT_MAX: '1',
      LOG_LEVEL: 'warn',
    });
    for (let i = 0; i < 3; i++) {
      const res = await get(app, '/users?perPage=1', '10.1.0.10');
      expect(res.statusCode).toBe(200);
      expectLimitHeaders(res, 1, 1);
    }
    // Behind PgBouncer before 1.21 (the scale topology) the pool may also say, once, that it lost a named statement.
    const said = lines.map((line) => line.msg).filter((msg) => !msg?.includes('lost a named prepared statement'));
    expect(said).toEqual(['Redis unavailable: requests are served without rate limiting until it is back']);
  });

  describe('lost mid-run and back', () => {
    let port: number;
    let server: ChildProcess | undefined;

    async function startRedis() {
      server = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {
          stdio: 'ignore',
        },
      );
      for (let attempt = 0; !(await accepts(port)); attempt++) {
        if (attempt >= 200) throw new Error(`redis-server did not start on port ${port}`);
        await sleep(25);
      }
    }

    async function stopRedis() {
      if (!server || server.exitCode !== null) return;
      const exited = once(server, 'exit');
      server.kill('SIGKILL');
      await exited;
      server = undefined;
    }

    beforeAll(async () => {
      port = await freePort();
      await startRedis();
    });
    afterAll(stopRedis);

    it('serves requests while Redis is gone and limits again once it is back', async () => {
      const { app } = await build({ REDIS_URL: `redis://127.0.0.1:${port}`, RATE_LIMIT_MAX: '2' });
      const ip = '10.1.0.11';
      const request = () => get(app, '/users?perPage=1', ip);

      expectLimitHeaders(await request(), 2, 1);
      expectLimitHeaders(await request(), 2, 0);
      expectRateLimited(await request(), 2);

      await stopRedis();
      for (let i = 0; i < 3; i++) {
        const res = await request();
        expect(res.statusCode).toBe(200);
        expectLimitHeaders(res, 2, 2);
      }

      // A fresh server has no counters: the first counted request shows one spent.
      await startRedis();
      let res = await request();
      for (let attempt = 0; res.headers['ratelimit-remaining'] !== '1' && attempt < 100; attempt++) {
        expect(res.statusCode).toBe(200);
        await sleep(50);
        res = await request();
      }
      expectLimitHeaders(res, 2, 1);
      expectLimitHeaders(await request(), 2, 0);
      expectRateLimited(await request(), 2);
    });

    it('a Redis that stops answering does not hold requests: they are served unlimited', async () => {
      const { app } = await build({ REDIS_URL: `redis://127.0.0.1:${port}`, RATE_LIMIT_MAX: '2' });
      const request = () => get(app, '/users?perPage=1', '10.1.0.12');
      expectLimitHeaders(await request(), 2, 1);

      // The limiter's commands (scripts that write) now wait, far longer than the command timeout, until the test
      // ends: a pause of a second ended before a loaded machine had sent the request.
      const redisCli = (...args: string[]) => promisify(execFile)('redis-cli', ['-p', String(port), ...args]);
      await redisCli('CLIENT', 'PAUSE', '60000', 'WRITE');
      cleanups.defer(() => redisCli('CLIENT', 'UNPAUSE'));
      const res = await request();
      expect(res.statusCode).toBe(200);
      expectLimitHeaders(res, 2, 2);
    });
  });
});
