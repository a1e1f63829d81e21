/**
 * HTTP caching for clients and shared caches (src/plugins/http-caching.ts):
 * list ETags with If-None-Match → 304, and the Cache-Control of every kind of
 * answer: anonymous public reads `public, max-age=0, s-maxage=N` (a shared
 * cache may keep them N seconds), the same read with a token `no-cache`, a
 * user's private data `private, no-store`, everything else `no-store`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPost, startTestApp, useTestApp, type TestApp } from '../helpers/factories.js';
import { VERSION } from '../../src/root.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const admin = t.admin({ name: 'Root' });
let postId: number;

beforeAll(async () => {
  postId = (await createPost(t.app, ann, { title: 'First' })).id;
});

const get = (url: string, headers: Record<string, string> = {}) => t.app.inject({ method: 'GET', url, headers });

describe('list ETags', () => {
  const lists = () => [
    '/posts',
    `/posts?author=${ann.user.id}&sort=-id&limit=5`,
    `/users/${ann.user.id}/posts`,
    `/posts/${postId}/comments`,
    '/users',
  ];

  it('every list answer carries a strong ETag, the same while nothing changes', async () => {
    for (const url of lists()) {
      const first = await get(url);
      expect(first.statusCode).toBe(200);
      expect(first.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(first.headers.etag).toMatch(/^"b[A-Za-z0-9_-]{22}"$/);
      expect((await get(url)).headers.etag).toBe(first.headers.etag);
    }
  });

  it('If-None-Match naming it gives 304 with no body, on GET and HEAD; any other tag the page', async () => {
    for (const url of lists()) {
      const { headers, body } = await get(url);
      const etag = headers.etag as string;
      for (const condition of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
        const res = await get(url, { 'if-none-match': condition });
        expect(res.statusCode).toBe(304);
        expect(res.body).toBe('');
        expect(res.headers.etag).toBe(etag);
        expect(res.headers['cache-control']).toBe('public, max-age=0, s-maxage=1');
        expect(res.headers['content-type']).toBeUndefined();
        expect(res.headers['content-length']).toBeUndefined();
      }
      const head = await t.app.inject({ method: 'HEAD', url, headers: { 'if-none-match': etag } });
      expect(head.statusCode).toBe(304);
      const other = await get(url, { 'if-none-match': '"other"' });
      expect(other.statusCode).toBe(200);
      expect(other.body).toBe(body);
    }
  });

  it('the ETag moves when an item of the page changes and when its total does', async () => {
    const url = `/users/${ann.user.id}/posts`;
    const before = (await get(url)).headers.etag as string;
    await t.app.inject({ method: 'PATCH', url: `/posts/${postId}`, headers: ann.auth, payload: { title: 'Renamed' } });
    const renamed = await get(url, { 'if-none-match': before });
    expect(renamed.statusCode).toBe(200);
    expect(renamed.json().data[0].title).toBe('Renamed');

    const perPage = `${url}?perPage=1`;
    const onePage = (await get(perPage)).headers.etag as string;
    await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: 'Second', body: 'text' },
    });
    // Same first item, one more in total.
    const grown = await get(perPage, { 'if-none-match': onePage });
    expect(grown.statusCode).toBe(200);
    expect(grown.json()).toMatchObject({ data: [{ id: postId }], total: 2 });
  });
});

describe('Cache-Control', () => {
  const publicReads = async (headers: Record<string, string> = {}) => {
    const post = await get(`/posts/${postId}`, headers);
    return [
      post,
      await get(`/posts/${postId}`, { ...headers, 'if-none-match': post.headers.etag as string }),
      await get('/posts', headers),
      await get(`/posts/${postId}/comments`, headers),
      await get(`/users/${ann.user.id}/posts`, headers),
      await get('/users', headers),
      await get(`/users/${admin.user.id}`, headers),
      await get('/events', headers),
    ];
  };

  it('anonymous public reads: public for shared caches SHARED_CACHE_SECONDS, revalidated by browsers; their 304 too', async () => {
    for (const res of await publicReads()) {
      expect(res.statusCode).toBeLessThan(400);
      expect([res.raw.req.url, res.headers['cache-control']]).toEqual([
        res.raw.req.url,
        'public, max-age=0, s-maxage=1',
      ]);
      expect(res.headers.vary).toBe('Authorization');
    }
  });

  it('the same reads with a token: never public, never s-maxage', async () => {
    // (GET /users with a token lists the reader's own e-mail: private, below.)
    for (const res of (await publicReads(ann.auth)).filter((res) => res.raw.req.url !== '/users')) {
      expect(res.statusCode).toBeLessThan(400);
      expect([res.raw.req.url, res.headers['cache-control']]).toEqual([res.raw.req.url, 'no-cache']);
      expect(res.headers.vary).toBe('Authorization');
    }
  });

  describe('SHARED_CACHE_SECONDS', () => {
    let zero: TestApp;
    let five: TestApp;
    beforeAll(async () => {
      [zero, five] = await Promise.all([
        startTestApp({ SHARED_CACHE_SECONDS: '0' }),
        startTestApp({ SHARED_CACHE_SECONDS: '5' }),
      ]);
    });
    afterAll(async () => Promise.all([zero?.close(), five?.close()]));

    it('0 gives no-cache, 5 s-maxage=5', async () => {
      expect((await zero.app.inject({ url: '/posts' })).headers['cache-control']).toBe('no-cache');
      expect((await five.app.inject({ url: '/posts' })).headers['cache-control']).toBe('public, max-age=0, s-maxage=5');
    });
  });

  it("answers holding a user's own data: private, no-store", async () => {
    const login = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: ann.user.email, password: ann.password },
    });
    const signUpAnswer = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'New', email: `new-${process.pid}@example.com`, password: 'a long password' },
    });
    const me = await get('/users/me', ann.auth);
    const cases = {
      'POST /tokens': login,
      'POST /users': signUpAnswer,
      'GET /users/me': me,
      'GET /users/me 304': await get('/users/me', { ...ann.auth, 'if-none-match': me.headers.etag as string }),
      'GET /tokens': await get('/tokens', ann.auth),
      'GET /users/{own id}': await get(`/users/${ann.user.id}`, ann.auth),
      'GET /users/{id} as admin': await get(`/users/${ann.user.id}`, admin.auth),
      'GET /users, listing own e-mail': await get('/users', ann.auth),
      'PATCH /users/{id}': await t.app.inject({
        method: 'PATCH',
        url: `/users/${ann.user.id}`,
        headers: ann.auth,
        payload: { name: 'Ann B.' },
      }),
      'GET /users/me without a token (401)': await get('/users/me'),
    };
    for (const [name, res] of Object.entries(cases)) {
      expect([name, res.headers['cache-control']]).toEqual([name, 'private, no-store']);
    }
    expect(cases['GET /users/{own id}'].json().email).toBe(ann.user.email);
  });

  it('writes, errors and health: no-store', async () => {
    const cases = {
      'POST /posts': await t.app.inject({
        method: 'POST',
        url: '/posts',
        headers: ann.auth,
        payload: { title: 'T', body: 'b' },
      }),
      'PATCH /posts/{id}': await t.app.inject({
        method: 'PATCH',
        url: `/posts/${postId}`,
        headers: ann.auth,
        payload: { title: 'T' },
      }),
      'GET 404': await get('/posts/999999'),
      'GET 422': await get('/posts?perPage=0'),
      'POST 401': await t.app.inject({ method: 'POST', url: '/posts', payload: { title: 'T', body: 'b' } }),
      'GET /health/ready': await get('/health/ready'),
      'GET /health/live': await get('/health/live'),
    };
    for (const [name, res] of Object.entries(cases)) {
      expect([name, res.headers['cache-control']]).toEqual([name, 'no-store']);
    }
    expect(cases['GET /health/ready'].json()).toEqual({ status: 'ok', version: VERSION });
  });
});
