/**
 * The plugins' declared order: each is refused at start without those it follows. The order and cost of
 * checks: a rate-limited client is refused before its token is judged, which is looked up once a request; the
 * password is hashed (scrypt, the costly step)
 * once, and only after every cheaper check passed; a replayed sign-up does not hash again; an ignored,
 * deeply nested body member cannot make the idempotency fingerprint (or anything else) overflow the
 * stack; a PATCH that changes nothing writes nothing.
 */
import { onTopology } from '../helpers/database.js';
import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyPluginCallback } from 'fastify';
import fp from 'fastify-plugin';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import auth from '../../src/plugins/auth.js';
import bodyParser from '../../src/plugins/body-parser.js';
import db from '../../src/plugins/db.js';
import gracefulClose from '../../src/plugins/graceful-close.js';
import httpSecurity from '../../src/plugins/http-security.js';
import metrics from '../../src/plugins/metrics.js';
import openapi from '../../src/plugins/openapi.js';
import rateLimit from '../../src/plugins/rate-limit.js';
import readRouting from '../../src/plugins/read-routing.js';
import requestLog from '../../src/plugins/request-log.js';
import retention from '../../src/plugins/retention.js';
import events from '../../src/events/plugin.js';
import webhookWorker from '../../src/events/webhooks/worker.js';
import { type SignedUp, useTestApp } from '../helpers/factories.js';
import { useCleanups } from '../helpers/cleanups.js';
import { expect404, expectError } from '../helpers/expect.js';

// A pass-through spy on the one password helper: the real scrypt runs, the calls are counted.
vi.mock('../../src/security.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/security.js')>();
  return { ...real, hashPassword: vi.fn(real.hashPassword), verifyPassword: vi.fn(real.verifyPassword) };
});
const security = await import('../../src/security.js');
const hashed = vi.mocked(security.hashPassword);
const verified = vi.mocked(security.verifyPassword);

// Likewise on the token lookup: the real query runs, the calls are counted.
const tokenLookups = vi.fn();
vi.mock('../../src/repositories/tokens.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/repositories/tokens.js')>();
  return {
    ...real,
    tokensRepository: (db: Parameters<typeof real.tokensRepository>[0]) => {
      const repo = real.tokensRepository(db);
      return { ...repo, authenticate: (hash: Buffer) => (tokenLookups(), repo.authenticate(hash)) };
    },
  };
});

const t = useTestApp();
const ann = t.user();
const bob = t.user();
const cleanups = useCleanups();
beforeEach(() => {
  hashed.mockClear();
  verified.mockClear();
  tokenLookups.mockClear();
});

describe('rate limit before token check', () => {
  async function limitedApp() {
    // Another instance than the one revoking tokens, asking the database on every
    // request: what is counted here is each lookup (auth-cache.test.ts covers the cache).
    const { app } = await cleanups.app(onTopology(t.db.url), { RATE_LIMIT_MAX: '2' }, { authCacheMs: 0 });
    return app;
  }
  const get = (app: FastifyInstance, remoteAddress: string, authorization?: string) =>
    app.inject({ url: '/users/me', remoteAddress, headers: authorization === undefined ? {} : { authorization } });

  it('is held by Fastify: auth registered before the rate limiter is refused at start', async () => {
    const app = Fastify();
    await app.register(fp(async () => undefined, { name: 'db' }));
    void app.register(auth, { cacheMs: 0 });
    await expect(app.ready()).rejects.toThrow(/dependency 'rate-limit'/);
  });

  it('a client guessing tokens gets a 429, not a 401, once its address is over its budget', async () => {
    const app = await limitedApp();
    const guess = () => `Bearer pat_${randomBytes(32).toString('base64url')}`;
    for (let i = 0; i < 2; i++) expect((await get(app, '10.9.0.1', guess())).statusCode).toBe(401);
    for (let i = 0; i < 3; i++) {
      const res = await get(app, '10.9.0.1', guess());
      expect(res.statusCode).toBe(429);
      expect(res.headers['retry-after']).toBeDefined();
    }
    // One lookup a request: the rate limiter and the auth hook share it.
    expect(tokenLookups).toHaveBeenCalledTimes(5);
  });

  it('a user over their budget gets a 429 from any address', async () => {
    const app = await limitedApp();
    for (let i = 0; i < 2; i++) expect((await get(app, '10.9.0.2', ann.auth.authorization)).statusCode).toBe(200);
    expect((await get(app, '10.9.0.2', ann.auth.authorization)).statusCode).toBe(429);
    expect((await get(app, '10.9.0.3', ann.auth.authorization)).statusCode).toBe(429);
    expect(tokenLookups).toHaveBeenCalledTimes(4);
    // Keyed by user, not by address: another user from the first address has a budget of its own.
    const other = await get(app, '10.9.0.2', bob.auth.authorization);
    expect(other.statusCode).toBe(200);
    expect(other.headers['ratelimit-remaining']).toBe('1');
  });

  it('a revoked token counts against the address from its first 401, no longer against its user', async () => {
    const app = await limitedApp();
    const login = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: bob.user.email, password: bob.password },
    });
    const { id, token } = login.json() as { id: number; token: string };
    expect((await get(app, '10.9.0.4', `Bearer ${token}`)).statusCode).toBe(200);
    await t.app.inject({ method: 'DELETE', url: `/tokens/${id}`, headers: { authorization: `Bearer ${token}` } });
    for (const remaining of ['1', '0']) {
      const again = await get(app, '10.9.0.4', `Bearer ${token}`);
      expect(again.statusCode).toBe(401);
      expect(again.headers['ratelimit-remaining']).toBe(remaining);
    }
    // Bob has spent one request of his budget of 2.
    const own = await get(app, '10.9.0.5', bob.auth.authorization);
    expect(own.statusCode).toBe(200);
    expect(own.headers['ratelimit-remaining']).toBe('0');
  });
});

describe('the plugins declare the order that matters', () => {
  // A plugin and the ones that must be registered before it, with why (each plugin's own declaration says so too).
  const ORDER: [name: string, plugin: FastifyPluginCallback<never>, after: string[]][] = [
    // Their failures are rendered by the one error handler.
    ['graceful-close', gracefulClose, ['errors']],
    ['http-security', httpSecurity, ['errors']],
    ['body-parser', bodyParser, ['errors']],
    ['db', db, ['errors']],
    // A closing server's 503 first; a 429 with the security and CORS headers.
    ['rate-limit', rateLimit, ['errors', 'graceful-close', 'http-security']],
    // A 429 before a 401.
    ['auth', auth, ['db', 'rate-limit']],
    // Only a request auth lets through is routed to a replica.
    ['read-routing', readRouting, ['db', 'auth']],
    ['request-log', requestLog, ['auth']],
    // errors' onRoute hook gives /openapi.json and /docs their 405s.
    ['openapi', openapi, ['errors']],
    // Their onClose hooks run before the pool ends.
    ['retention', retention, ['db']],
    ['events', events, ['db']],
    ['webhook-worker', webhookWorker, ['db', 'events']],
    ['metrics', metrics, ['db', 'read-routing', 'events', 'webhook-worker']],
  ];
  const standIn = (name: string) => fp(async () => undefined, { name });

  it.each(ORDER)('%s is refused at start without each plugin it follows', async (_name, plugin, after) => {
    for (const missing of after) {
      const app = Fastify();
      for (const name of after) if (name !== missing) await app.register(standIn(name));
      // The check comes before the plugin runs: its options are never read.
      void app.register(plugin, {} as never);
      await expect(app.ready()).rejects.toThrow(`dependency '${missing}'`);
      await app.close();
    }
  });

  it.each(ORDER)('%s declares exactly those', (name, plugin, after) => {
    const meta = (plugin as unknown as Record<symbol, { name?: string; dependencies?: string[] }>)[
      Symbol.for('plugin-meta')
    ];
    expect(meta?.name).toBe(name);
    expect([...(meta?.dependencies ?? [])].sort()).toEqual([...after].sort());
  });
});

const patchUser = (id: number | string, who: SignedUp, payload: object, headers: Record<string, string> = {}) =>
  t.app.inject({ method: 'PATCH', url: `/users/${id}`, headers: { ...who.auth, ...headers }, payload });

const rowOf = async (id: number) =>
  (await t.app.db.query<{ version: number; xmin: string }>('SELECT version, xmin::text FROM users WHERE id = $1', [id]))
    .rows[0]!;

describe('PATCH /users/{id} with a new password', () => {
  it('hashes nothing for a 404, 403, 412 or 409', async () => {
    expect404(await patchUser(999_999, ann, { password: 'a-new-password' }), 'user 999999 does not exist');
    expectError(
      await patchUser(bob.user.id, ann, { password: 'a-new-password' }),
      403,
      'forbidden',
      'you may only change your own profile',
    );
    const stale = await patchUser(ann.user.id, ann, { password: 'a-new-password' }, { 'if-match': '"u1-stale"' });
    expectError(stale, 412, 'precondition_failed', 'If-Match does not match the current ETag');
    const taken = await patchUser(ann.user.id, ann, { email: bob.user.email, password: 'a-new-password' });
    expectError(taken, 409, 'conflict', 'email is already registered', { email: ['is already registered'] });
    expect(hashed).not.toHaveBeenCalled();
  });

  it('hashes once for a change that is made', async () => {
    const res = await patchUser(ann.user.id, ann, { password: 'a-new-password' });
    expect(res.statusCode).toBe(200);
    expect(hashed).toHaveBeenCalledTimes(1);
    const login = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: ann.user.email, password: 'a-new-password' },
    });
    expect(login.statusCode).toBe(201);
  });
});

describe('POST /users', () => {
  const body = { name: 'Zoe', email: 'zoe@example.com', password: 'password-zoe' };
  const signUpWith = (key: string | undefined, payload: object) =>
    t.app.inject({
      method: 'POST',
      url: '/users',
      headers: key === undefined ? {} : { 'idempotency-key': key },
      payload,
    });

  it('a sign-up with an Idempotency-Key hashes once; its replay verifies once and hashes nothing', async () => {
    const first = await signUpWith('zoe-1', body);
    expect(first.statusCode).toBe(201);
    expect(hashed).toHaveBeenCalledTimes(1);
    expect(verified).not.toHaveBeenCalled();
    hashed.mockClear();

    const replay = await signUpWith('zoe-1', body);
    expect(replay.statusCode).toBe(201);
    expect(replay.body).toBe(first.body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(hashed).not.toHaveBeenCalled();
    expect(verified).toHaveBeenCalledTimes(1);

    const other = await signUpWith('zoe-1', { ...body, password: 'another-password' });
    expectError(other, 422, 'validation', 'request is invalid', {
      'Idempotency-Key': ['was already used for a different request'],
    });
    expect(hashed).not.toHaveBeenCalled();
  });

  it('the stored record keeps the password only as the same scrypt hash as the user', async () => {
    const { rows } = await t.app.db.query<{ secret: string; stored: string; body: string }>(
      `SELECT k.secret_hash AS secret, u.password_hash AS stored, k.body FROM idempotency_keys k
       JOIN users u ON lower(u.email) = 'zoe@example.com' WHERE k.key = 'zoe-1'`,
    );
    expect(rows[0]!.secret).toBe(rows[0]!.stored);
    expect(rows[0]!.secret).toMatch(/^scrypt\$/);
    expect(JSON.stringify(rows[0])).not.toContain(body.password);
  });

  it('an e-mail already registered is a 409 before any hashing, with a key or without', async () => {
    for (const key of [undefined, 'zoe-2']) {
      const res = await signUpWith(key, { ...body, email: 'ZOE@example.com' });
      expectError(res, 409, 'conflict', 'email is already registered', { email: ['is already registered'] });
    }
    expect(hashed).not.toHaveBeenCalled();
  });

  it('a deeply nested value in an ignored member with an Idempotency-Key is no 500', async () => {
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`;
    const payload = `{"name":"Deep","email":"deep@example.com","password":"password-deep","id":${deep}}`;
    const send = () =>
      t.app.inject({
        method: 'POST',
        url: '/users',
        headers: { 'idempotency-key': 'deep-1', 'content-type': 'application/json' },
        payload,
      });
    const first = await send();
    expect(first.statusCode).toBe(201);
    const replay = await send();
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');

    const post = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'idempotency-key': 'deep-2', 'content-type': 'application/json' },
      payload: `{"title":"T","body":"B","createdAt":${`${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`}}`,
    });
    expect(post.statusCode).toBe(201);

    // As deep as the body limit allows (1 MiB), on a create and a change: nothing walks it.
    const deepest = `${'['.repeat(500_000)}${']'.repeat(500_000)}`;
    const big = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'idempotency-key': 'deep-3', 'content-type': 'application/json' },
      payload: `{"title":"T","body":"B","id":${deepest}}`,
    });
    expect(big.statusCode).toBe(201);
    const patch = await t.app.inject({
      method: 'PATCH',
      url: `/posts/${big.json().id}`,
      headers: { ...ann.auth, 'content-type': 'application/json' },
      payload: `{"title":"T2","updatedAt":${deepest}}`,
    });
    expect(patch.statusCode).toBe(200);
  });

  it('read-only members do not make another request: the retry without them is a replay', async () => {
    const first = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'idempotency-key': 'ro-1' },
      payload: { title: 'T', body: 'B', id: 7 },
    });
    const again = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'idempotency-key': 'ro-1' },
      payload: { title: 'T', body: 'B' },
    });
    expect(again.body).toBe(first.body);
    expect(again.headers['idempotent-replayed']).toBe('true');
  });
});

describe('a PATCH that changes nothing writes nothing', () => {
  it('PATCH /users/{id} with an empty body (or only read-only members): 200, row untouched', async () => {
    const before = await rowOf(bob.user.id);
    for (const payload of [{}, { id: 1, createdAt: 'x' }]) {
      const res = await patchUser(bob.user.id, bob, payload);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual(bob.user);
    }
    expect(await rowOf(bob.user.id)).toEqual(before);
    // The checks still apply.
    expect404(await patchUser(999_999, bob, {}), 'user 999999 does not exist');
    expectError(await patchUser(ann.user.id, bob, {}), 403, 'forbidden', 'you may only change your own profile');
  });

  it('nor does one that sets the values already stored, on users, posts and comments', async () => {
    const before = await rowOf(bob.user.id);
    const same = await patchUser(bob.user.id, bob, { name: bob.user.name, email: bob.user.email });
    expect(same.statusCode).toBe(200);
    expect(await rowOf(bob.user.id)).toEqual(before);

    const post = (
      await t.app.inject({ method: 'POST', url: '/posts', headers: bob.auth, payload: { title: 'T', body: 'B' } })
    ).json();
    const put = await t.app.inject({ method: 'PUT', url: `/posts/${post.id}`, headers: bob.auth, payload: post });
    expect(put.json()).toEqual(post);
    expect(put.headers.etag).toBe(`"p${post.id}-1-0"`);
    const changed = await t.app.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: bob.auth,
      payload: { title: 'T2' },
    });
    expect(changed.headers.etag).toBe(`"p${post.id}-2-0"`);

    const url = `/posts/${post.id}/comments`;
    const comment = (await t.app.inject({ method: 'POST', url, headers: bob.auth, payload: { body: 'c' } })).json();
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `${url}/${comment.id}`,
      headers: bob.auth,
      payload: { body: 'c' },
    });
    expect(patched.json()).toEqual(comment);
    expect(patched.headers.etag).toBe(`"c${comment.id}-1"`);
  });
});
