/**
 * The response cache (src/plugins/response-cache.ts): repeated public reads are
 * answered from memory, and no read ever shows data older than a write its
 * client could know about — through this instance, another instance, or SQL.
 *
 * "Unnoticed" writes go around the triggers (session_replication_role =
 * replica), so nothing tells the cache: a read that still shows the old value
 * afterwards was served from the cache, one that shows the new value was not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { signUp, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';
import { waitUntil } from '../helpers/processes.js';

let t: TestApp;
let ann: SignedUp;
let bob: SignedUp;

beforeAll(async () => {
  t = await startTestApp();
  ann = await signUp(t.app, { name: 'Ann' });
  bob = await signUp(t.app, { name: 'Bob' });
});
afterAll(() => t.close());

async function sql(text: string, values: unknown[] = [], unnoticed = false): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: t.db.url });
  await client.connect();
  try {
    if (unnoticed) await client.query('SET session_replication_role = replica');
    return await client.query(text, values);
  } finally {
    await client.end();
  }
}
const retitle = (id: number, title: string, unnoticed = true) => sql('UPDATE posts SET title = $2 WHERE id = $1', [id, title], unnoticed);

/** Waits until the notifications of earlier writes (which empty the caches) have reached these instances. */
const settle = (...apps: FastifyInstance[]) => Promise.all([t.app, ...apps].map((app) => app.responseCache.sync()));

async function createPost(title: string, app: FastifyInstance = t.app, who = ann): Promise<{ id: number; title: string }> {
  const res = await app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload: { title, body: 'text' } });
  expect(res.statusCode).toBe(201);
  return res.json();
}
const get = (url: string, app: FastifyInstance = t.app, headers: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url, headers });
const titleOf = async (id: number, app: FastifyInstance = t.app) => (await get(`/posts/${id}`, app)).json().title as string;

/** Runs fn with a second instance of the app on the same database, closed afterwards. */
async function withSecondInstance(env: Record<string, string>, fn: (other: FastifyInstance) => Promise<void>): Promise<void> {
  const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', ...env });
  const other = (await buildApp({ ...config, databaseUrl: t.db.url })) as unknown as FastifyInstance;
  try {
    await other.ready();
    await fn(other);
  } finally {
    await other.close();
  }
}

describe('hits', () => {
  it('a repeated read is answered from the cache with the same body and headers, and per-request headers of its own', async () => {
    const post = await createPost('Cached');
    await settle();
    const url = `/posts/${post.id}`;
    const first = await get(url);
    await retitle(post.id, 'Changed unnoticed');
    const second = await get(url);

    expect(second.statusCode).toBe(200);
    expect(second.body).toBe(first.body);
    expect(second.json()).toMatchObject({ id: post.id, title: 'Cached' });
    for (const name of ['content-type', 'etag', 'ratelimit-limit', 'content-security-policy'] as const) {
      expect(second.headers[name]).toBe(first.headers[name]);
    }
    expect(second.headers['ratelimit-remaining']).toBe(String(Number(first.headers['ratelimit-remaining']) - 1));
    expect(second.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
  });

  it('lists keep their Link header; each URL is its own entry', async () => {
    await createPost('Listed');
    await settle();
    const url = '/posts?perPage=1&sort=-id';
    const first = await get(url);
    expect(first.headers.link).toContain('rel="next"');
    const top = first.json().data[0] as { id: number };
    await retitle(top.id, 'Renamed unnoticed');

    const second = await get(url);
    expect(second.body).toBe(first.body);
    expect(second.headers.link).toBe(first.headers.link);
    // Another URL of the same list was never cached: it reads the database.
    expect((await get('/posts?perPage=2&sort=-id')).json().data[0].title).toBe('Renamed unnoticed');
  });

  it('If-None-Match and HEAD always reach the route: a 304 or the current ETag', async () => {
    const post = await createPost('Conditional');
    await settle();
    const url = `/posts/${post.id}`;
    const cached = await get(url);
    await sql('UPDATE posts SET version = version + 1 WHERE id = $1', [post.id], true);

    const current = `"p${post.id}-2-0"`;
    expect((await get(url)).headers.etag).toBe(cached.headers.etag);
    const conditional = await get(url, t.app, { 'if-none-match': current });
    expect(conditional.statusCode).toBe(304);
    const head = await t.app.inject({ method: 'HEAD', url });
    expect(head.statusCode).toBe(200);
    expect(head.headers.etag).toBe(current);
  });

  it('a bad token is still a 401 and errors are never cached', async () => {
    const post = await createPost('Guarded');
    const url = `/posts/${post.id}`;
    await get(url);
    const res = await get(url, t.app, { authorization: 'Bearer not-a-token' });
    expect(res.statusCode).toBe(401);

    const missing = '/posts/999999';
    expect((await get(missing)).statusCode).toBe(404);
    await sql(
      `INSERT INTO posts (id, author_id, title, body) OVERRIDING SYSTEM VALUE VALUES (999999, $1, 'Late', 'text')`,
      [ann.user.id],
      true,
    );
    expect((await get(missing)).statusCode).toBe(200);
    await sql('DELETE FROM posts WHERE id = 999999', [], true);
  });
});

describe('invalidation', () => {
  it('every write through the app shows in the very next read, in lists, counts and ETags', async () => {
    const post = await createPost('Before');
    const url = `/posts/${post.id}`;
    const list = `/posts?sort=-id&perPage=5`;
    const comments = `${url}/comments`;
    const prime = () => Promise.all([get(url), get(list), get(comments)]);

    await prime();
    const patched = await t.app.inject({ method: 'PATCH', url, headers: ann.auth, payload: { title: 'Patched' } });
    expect(patched.statusCode).toBe(200);
    const read = await get(url);
    expect(read.json().title).toBe('Patched');
    expect(read.headers.etag).toBe(patched.headers.etag);
    expect((await get(list)).json().data[0].title).toBe('Patched');

    await prime();
    const put = await t.app.inject({ method: 'PUT', url, headers: ann.auth, payload: { title: 'Put', body: 'new text' } });
    expect(put.statusCode).toBe(200);
    expect((await get(url)).json()).toMatchObject({ title: 'Put', body: 'new text' });

    await prime();
    const commented = await t.app.inject({ method: 'POST', url: comments, headers: bob.auth, payload: { body: 'first!' } });
    expect(commented.statusCode).toBe(201);
    const commentUrl = `${comments}/${commented.json().id}`;
    expect((await get(url)).json().commentCount).toBe(1);
    expect((await get(comments)).json()).toMatchObject({ total: 1, data: [{ body: 'first!' }] });

    await get(commentUrl);
    const edited = await t.app.inject({ method: 'PATCH', url: commentUrl, headers: bob.auth, payload: { body: 'edited' } });
    expect(edited.statusCode).toBe(200);
    expect((await get(commentUrl)).json().body).toBe('edited');

    await prime();
    expect((await t.app.inject({ method: 'DELETE', url: commentUrl, headers: bob.auth })).statusCode).toBe(204);
    expect((await get(commentUrl)).statusCode).toBe(404);
    expect((await get(url)).json().commentCount).toBe(0);

    const created = await createPost('Newest');
    expect((await get(list)).json().data[0]).toMatchObject({ id: created.id, title: 'Newest' });

    await prime();
    expect((await t.app.inject({ method: 'DELETE', url, headers: ann.auth })).statusCode).toBe(204);
    expect((await get(url)).statusCode).toBe(404);
    expect((await get(comments)).statusCode).toBe(404);
    expect((await get(list)).json().data.map((p: { id: number }) => p.id)).not.toContain(post.id);
  });

  it('a write through SQL (triggers on) reaches the cache through its notification', async () => {
    const post = await createPost('Original');
    expect(await titleOf(post.id)).toBe('Original');
    await retitle(post.id, 'Changed in SQL', false);
    await waitUntil('the SQL change shows', async () => (await titleOf(post.id)) === 'Changed in SQL', 40, 25);
  });

  it("another instance's write reaches this instance's cache", async () => {
    await withSecondInstance({}, async (other) => {
      const post = await createPost('Shared');
      const url = `/posts/${post.id}`;
      expect(await titleOf(post.id, other)).toBe('Shared');
      const patched = await t.app.inject({ method: 'PATCH', url, headers: ann.auth, payload: { title: 'Changed elsewhere' } });
      expect(patched.statusCode).toBe(200);
      await waitUntil('the other instance shows the change', async () => (await titleOf(post.id, other)) === 'Changed elsewhere', 40, 25);

      // and the other way round, for lists
      const list = '/posts?sort=-id&perPage=1';
      await get(list);
      const created = await createPost('From the other instance', other);
      await waitUntil('this instance lists the new post', async () => (await get(list)).json().data[0].id === created.id, 40, 25);
    });
  });

  it('while the listening connection is lost nothing is served from the cache; it reconnects and caches again', async () => {
    const post = await createPost('v1');
    await settle();
    expect(await titleOf(post.id)).toBe('v1');
    await retitle(post.id, 'v2');
    expect(await titleOf(post.id)).toBe('v1');

    const listeners = () =>
      sql(`SELECT pid FROM pg_stat_activity WHERE application_name = 'posts-api-cache' AND datname = current_database()`);
    const [before] = (await listeners()).rows as { pid: number }[];
    expect(before).toBeDefined();
    await sql('SELECT pg_terminate_backend($1)', [before!.pid]);
    await waitUntil('the cache listens again', async () => {
      const { rows } = await listeners();
      return rows.length === 1 && rows[0].pid !== before!.pid;
    });
    await waitUntil('the reconnected cache is in use', async () => (await titleOf(post.id)) === 'v2', 40, 25);

    await retitle(post.id, 'v3');
    expect(await titleOf(post.id)).toBe('v2');
  });
});

describe('limits', () => {
  it('RESPONSE_CACHE_MB=0 turns it off: every read goes to the database', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '0' }, async (other) => {
      const post = await createPost('Uncached');
      await settle(other);
      expect(await titleOf(post.id, other)).toBe('Uncached');
      await retitle(post.id, 'Seen at once');
      expect(await titleOf(post.id, other)).toBe('Seen at once');
      const listeners = await sql(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'posts-api-cache' AND datname = current_database()`,
      );
      expect(listeners.rows[0].n).toBe(1); // t.app's only

      // Its writes are still announced to the instances that do cache.
      expect(await titleOf(post.id)).toBe('Seen at once');
      const patched = await other.inject({ method: 'PATCH', url: `/posts/${post.id}`, headers: ann.auth, payload: { title: 'From a cache-less instance' } });
      expect(patched.statusCode).toBe(200);
      await waitUntil('the caching instance shows the change', async () => (await titleOf(post.id)) === 'From a cache-less instance', 40, 25);
    });
  });

  it('the oldest answers make room for new ones; long URLs count against the budget', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '1' }, async (other) => {
      const post = await createPost('Oldest');
      await settle(other);
      expect(await titleOf(post.id, other)).toBe('Oldest');
      // Twelve answers with 100 000-character URLs (empty query pairs are skipped): over 1 MiB of keys.
      const longUrl = (k: number) => `/posts?${'&'.repeat(100_000)}sort=-id&perPage=${k + 1}`;
      for (let k = 0; k < 12; k++) expect((await get(longUrl(k), other)).statusCode).toBe(200);
      const newest = longUrl(11);
      const before = (await get(newest, other)).body;
      expect(JSON.parse(before).data[0]).toMatchObject({ id: post.id, title: 'Oldest' });

      await retitle(post.id, 'Changed unnoticed');
      // The oldest entry was evicted, so its read reaches the database; the newest is still cached.
      expect(await titleOf(post.id, other)).toBe('Changed unnoticed');
      expect((await get(newest, other)).body).toBe(before);
    });
  });

  it('an answer over an eighth of the budget is not cached', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '1' }, async (other) => {
      const big = 'x'.repeat(50_000);
      const post = await createPost('Big');
      await sql('UPDATE posts SET body = $2 WHERE id = $1', [post.id, big]);
      const url = `/posts?author=${ann.user.id}&sort=-id&perPage=3`;
      for (let i = 0; i < 2; i++) await createPost(`Big ${i}`);
      await sql('UPDATE posts SET body = $2 WHERE author_id = $1', [ann.user.id, big], true);

      const first = await get(url, other);
      expect(first.body.length).toBeGreaterThan(1_048_576 / 8);
      await sql('UPDATE posts SET title = $2 WHERE author_id = $1', [ann.user.id, 'Renamed'], true);
      expect((await get(url, other)).json().data.map((p: { title: string }) => p.title)).toEqual(['Renamed', 'Renamed', 'Renamed']);
      // A small answer on the same instance is cached.
      await settle(other);
      await get(`/posts/${post.id}`, other);
      await retitle(post.id, 'Small change');
      expect(await titleOf(post.id, other)).toBe('Renamed');
    });
  });
});
