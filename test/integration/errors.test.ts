/**
 * One error body everywhere (docs/api.md §2): every status the foundation can give,
 * the order when several apply, request ids, 500 without internals, and 503
 * while PostgreSQL is unreachable with recovery once it is back.
 */
import { onTopology } from '../helpers/database.js';
import net from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { buildApp } from '../../src/app.js';
import type { FastifyInstance } from 'fastify';
import { checkAgainstDocument } from '../helpers/openapi-conformance.js';
import { testConfig, useTestApp } from '../helpers/factories.js';

// No webhook worker: its poll would query the pool while a test counts the queries a request sends.
const t = useTestApp({ BODY_LIMIT: '2048', WEBHOOK_CONCURRENCY: '0' });
const ann = t.user();
const bob = t.user();

function expectError(
  res: { statusCode: number; headers: Record<string, unknown>; json(): unknown },
  status: number,
  error: string,
) {
  expect(res.statusCode).toBe(status);
  expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
  const body = res.json() as Record<string, unknown>;
  expect(body.error).toBe(error);
  expect(typeof body.message).toBe('string');
  expect(body.requestId).toBe(res.headers['x-request-id']);
  const allowed =
    status === 422 || status === 409
      ? ['error', 'message', 'requestId', 'fieldErrors']
      : ['error', 'message', 'requestId'];
  expect(Object.keys(body).every((k) => allowed.includes(k))).toBe(true);
  return body;
}

describe('request ids', () => {
  it('echoes a sane X-Request-Id, replaces an unsafe one', async () => {
    const sane = await t.app.inject({ url: '/health/live', headers: { 'x-request-id': 'client-42.a:b' } });
    expect(sane.headers['x-request-id']).toBe('client-42.a:b');
    const unsafe = await t.app.inject({ url: '/nope', headers: { 'x-request-id': 'bad id\twith spaces' } });
    expect(unsafe.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expectError(unsafe, 404, 'not_found');
    const long = await t.app.inject({ url: '/health/live', headers: { 'x-request-id': 'a'.repeat(129) } });
    expect(long.headers['x-request-id']).not.toBe('a'.repeat(129));
  });
});

describe('400 bad_request', () => {
  it.each([
    ['invalid JSON', '{"name":', 'body is not valid JSON'],
    ['an array', '[1,2]', 'body must be a JSON object'],
    ['a string', '"hello"', 'body must be a JSON object'],
    ['null', 'null', 'body must be a JSON object'],
  ])('body that is %s', async (_what, payload, message) => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload,
      headers: { 'content-type': 'application/json' },
    });
    expect(expectError(res, 400, 'bad_request').message).toBe(message);
  });

  it('a POST with no body at all', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/users' });
    expectError(res, 400, 'bad_request');
  });

  // Valid JSON: the answer says what is refused, not that the JSON is broken.
  const POISONING = 'body must not contain a __proto__ or constructor.prototype member';
  it.each([
    [
      'a __proto__ member',
      'POST',
      '{"name":"x","email":"p@example.com","password":"12345678","__proto__":{"admin":true}}',
    ],
    ['a nested __proto__ member', 'POST', '{"name":"x","profile":{"__proto__":{"admin":true}}}'],
    ['a constructor.prototype member', 'POST', '{"name":"x","constructor":{"prototype":{"admin":true}}}'],
    ['a __proto__ member in a merge patch', 'PATCH', '{"__proto__":{"admin":true}}'],
  ])('prototype poisoning is refused: %s', async (_what, method, payload) => {
    const patch = method === 'PATCH';
    const res = await t.app.inject({
      method: patch ? 'PATCH' : 'POST',
      url: patch ? `/users/${ann.user.id}` : '/users',
      payload,
      headers: patch
        ? { ...ann.auth, 'content-type': 'application/merge-patch+json' }
        : { 'content-type': 'application/json' },
    });
    expect(expectError(res, 400, 'bad_request').message).toBe(POISONING);
  });

  it('a member merely named constructor is no poisoning: an unknown member (422)', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: '{"name":"x","email":"c@example.com","password":"12345678","constructor":{"name":"y"}}',
      headers: { 'content-type': 'application/json' },
    });
    expect(expectError(res, 422, 'validation').fieldErrors).toEqual({ constructor: ['is not allowed'] });
  });
});

describe('401 unauthorized', () => {
  it.each([
    ['an unknown token', 'Bearer pat_unknown'],
    ['a malformed header', 'Basic dXNlcjpwYXNz'],
    ['an empty bearer', 'Bearer '],
  ])('%s is a 401 even on a public route', async (_what, authorization) => {
    const res = await t.app.inject({ url: '/users', headers: { authorization } });
    expectError(res, 401, 'unauthorized');
    expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
  });

  it('a token that could never have been issued is refused without a database query', async () => {
    const malformed = [
      'pat_unknown',
      `pat_${'a'.repeat(42)}`,
      `pat_${'a'.repeat(44)}`,
      `tok_${'a'.repeat(43)}`,
      'a'.repeat(47),
    ];
    const query = vi.spyOn(t.app.db, 'query');
    try {
      for (const token of malformed) {
        const res = await t.app.inject({ url: '/posts/1', headers: { authorization: `Bearer ${token}` } });
        expectError(res, 401, 'unauthorized');
        expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
      }
      expect(query).not.toHaveBeenCalled();
      // A well-formed unknown token is looked up (and refused the same way).
      const res = await t.app.inject({ url: '/posts/1', headers: { authorization: `Bearer pat_${'a'.repeat(43)}` } });
      expectError(res, 401, 'unauthorized');
      expect(query).toHaveBeenCalledTimes(1);
    } finally {
      query.mockRestore();
    }
  });

  it('comes before 415 and 422 (order: 401, 400/413/415, 422)', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${ann.user.id}`,
      payload: 'x',
      headers: { 'content-type': 'text/plain' },
    });
    expectError(res, 401, 'unauthorized');
  });
});

describe('403, 404, 405', () => {
  it('403 changing another user', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${ann.user.id}`,
      headers: bob.auth,
      payload: { name: 'x' },
    });
    expectError(res, 403, 'forbidden');
  });

  it('404 for unknown routes, with the body', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/no/such/thing?x=1' });
    expect(expectError(res, 404, 'not_found').message).toBe('no route GET /no/such/thing');
  });

  it('a malformed URL is a 400, an over-long path segment a 404, both with the body', async () => {
    expect(expectError(await t.app.inject({ url: '/users/%zz' }), 400, 'bad_request').message).toBe(
      'the URL is malformed',
    );
    expectError(await t.app.inject({ url: `/users/${'9'.repeat(150)}` }), 404, 'not_found');
  });

  it('405 with Allow for a known path and an unsupported method', async () => {
    const res = await t.app.inject({ method: 'DELETE', url: `/users/${ann.user.id}` });
    expectError(res, 405, 'method_not_allowed');
    expect(res.headers.allow).toBe('GET, HEAD, PATCH');
    const collection = await t.app.inject({ method: 'PUT', url: '/tokens' });
    expectError(collection, 405, 'method_not_allowed');
    expect(collection.headers.allow).toBe('GET, HEAD, POST');
  });

  it('HEAD works wherever GET does', async () => {
    const res = await t.app.inject({ method: 'HEAD', url: `/users/${ann.user.id}` });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
    expect(res.headers['x-request-id']).toBeDefined();
  });
});

describe('413, 415', () => {
  it('413 over BODY_LIMIT', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'x'.repeat(3000), email: 'big@example.com', password: '12345678' },
    });
    expectError(res, 413, 'payload_too_large');
  });

  it('415 for a body that is not JSON', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: 'name=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectError(res, 415, 'unsupported_media_type');
  });

  it('415 for merge-patch on POST, accepted on PATCH', async () => {
    const post = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: JSON.stringify({ email: 'a@example.com', password: 'x' }),
      headers: { 'content-type': 'application/merge-patch+json' },
    });
    expectError(post, 415, 'unsupported_media_type');
    const patch = await t.app.inject({
      method: 'PATCH',
      url: `/users/${ann.user.id}`,
      payload: JSON.stringify({ name: 'Merged' }),
      headers: { 'content-type': 'application/merge-patch+json', ...ann.auth },
    });
    expect(patch.statusCode).toBe(200);
    expect(patch.json().name).toBe('Merged');
  });
});

describe('422 validation', () => {
  it('unknown query parameters and bad values, all at once', async () => {
    const res = await t.app.inject({ url: '/users?perPage=0&page=abc&sort=password&colour=red' });
    const body = expectError(res, 422, 'validation');
    expect(body.fieldErrors).toEqual({
      colour: ['is not allowed'],
      sort: ['must be one of: id, -id, createdAt, -createdAt, name, -name'],
      page: ['must be an integer'],
      perPage: ['must be at least 1'],
    });
  });

  it('perPage over 100, limit over 100', async () => {
    const res = await t.app.inject({ url: '/users?perPage=101' });
    expect(expectError(res, 422, 'validation').fieldErrors).toEqual({ perPage: ['must be at most 100'] });
    const cursor = await t.app.inject({ url: '/users?limit=101' });
    expect(expectError(cursor, 422, 'validation').fieldErrors).toEqual({ limit: ['must be at most 100'] });
  });

  it('mixing page/perPage with after/limit', async () => {
    const res = await t.app.inject({ url: `/users?page=1&after=${ann.user.id}&limit=5` });
    expect(expectError(res, 422, 'validation').fieldErrors).toEqual({
      after: ['cannot be combined with page, perPage or snapshot'],
      limit: ['cannot be combined with page, perPage or snapshot'],
    });
  });

  it('an after that never named an item', async () => {
    const res = await t.app.inject({ url: '/users?after=987654321' });
    expect(expectError(res, 422, 'validation').fieldErrors).toEqual({ after: ['does not name an item of this list'] });
  });

  it('wrong JSON types in a body', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 5, email: ['a'], password: true },
    });
    expect(expectError(res, 422, 'validation').fieldErrors).toEqual({
      name: ['must be a string'],
      email: ['must be a string'],
      password: ['must be a string'],
    });
  });
});

describe('500 internal', () => {
  it('says nothing internal', async () => {
    const db = t.db;
    const app = await buildApp({ ...testConfig(), ...onTopology(db.url) });
    app.get('/boom', async () => {
      throw Object.assign(new Error('syntax error at or near "secret_table" at /srv/app.js:12'), { code: '42601' });
    });
    const res = await app.inject({ url: '/boom' });
    const body = expectError(res, 500, 'internal');
    expect(JSON.stringify(body)).not.toMatch(/secret_table|app\.js|42601|stack/);
    await app.close();
  });
});

describe('503 while the database is unreachable, recovery without restart', () => {
  it('answers 503 with Retry-After, then serves again when the database returns', async () => {
    // A TCP relay in front of the test database that the test can cut and restore.
    const target = new URL(t.db.url);
    const sockets = new Set<net.Socket>();
    let open = true;
    const relay = net.createServer((client) => {
      if (!open) return client.destroy();
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      sockets.add(client).add(upstream);
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    const port = (relay.address() as net.AddressInfo).port;
    const url = new URL(t.db.url);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const app = await buildApp({ ...testConfig(), databaseUrl: url.toString() });
    await checkAgainstDocument(app as unknown as FastifyInstance);
    try {
      expect((await app.inject({ url: '/health/ready' })).statusCode).toBe(200);
      expect((await app.inject({ url: '/users' })).statusCode).toBe(200);

      open = false;
      for (const s of sockets) s.destroy();
      const ready = await app.inject({ url: '/health/ready' });
      expectError(ready, 503, 'service_unavailable');
      expect(ready.headers['retry-after']).toBe('5');
      const list = await app.inject({ url: '/users' });
      expectError(list, 503, 'service_unavailable');
      const write = await app.inject({
        method: 'POST',
        url: '/users',
        payload: { name: 'Zed', email: 'zed@example.com', password: '12345678' },
      });
      expectError(write, 503, 'service_unavailable');
      expect((await app.inject({ url: '/health/live' })).statusCode).toBe(200);

      open = true;
      expect((await app.inject({ url: '/health/ready' })).statusCode).toBe(200);
      expect((await app.inject({ url: '/users' })).statusCode).toBe(200);
    } finally {
      await app.close();
      relay.close();
    }
  });
});
