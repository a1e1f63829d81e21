/**
 * The response cache (src/plugins/response-cache.ts): repeated public reads are
 * answered from memory; a write evicts what it changed, on every instance,
 * before it answers; a request that changed nothing evicts nothing; staleness
 * stays bounded when notifications are lost or stall.
 *
 * "Unnoticed" writes go around the triggers (session_replication_role =
 * replica), so nothing tells the cache: a read that still shows the old value
 * afterwards was served from the cache, one that shows the new value was not.
 */
import { onTopology } from '../helpers/database.js';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/config.js';
import { CHANGES_CHANNEL } from '../../src/db/pool.js';
import { idempotencyLockId } from '../../src/repositories/idempotency-keys.js';
import { createComment, createPost, useTestApp, type SignedUp } from '../helpers/factories.js';
import { waitUntil } from '../helpers/processes.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });

/** A write from outside the service, on a session of its own: directly on the server, not through a pooler (its SET is session state). */
async function sql(text: string, values: unknown[] = [], unnoticed = false): Promise<pg.QueryResult> {
  const { databaseListenUrl, databaseUrl } = onTopology(t.db.url);
  const client = new pg.Client({ connectionString: databaseListenUrl ?? databaseUrl });
  await client.connect();
  try {
    if (unnoticed) await client.query('SET session_replication_role = replica');
    return await client.query(text, values);
  } finally {
    await client.end();
  }
}
const retitle = (id: number, title: string, unnoticed = true) =>
  sql('UPDATE posts SET title = $2 WHERE id = $1', [id, title], unnoticed);

/** Waits until the notifications of earlier writes have reached these instances. */
const settle = (...apps: FastifyInstance[]) => Promise.all([t.app, ...apps].map((app) => app.responseCache.sync()));

const get = (url: string, app: FastifyInstance = t.app, headers: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url, headers });
/** A URL is stored the second time it is missed: read it twice. */
async function prime(url: string, app: FastifyInstance = t.app) {
  await get(url, app);
  return get(url, app);
}
const titleOf = async (id: number, app: FastifyInstance = t.app) =>
  (await get(`/posts/${id}`, app)).json().title as string;
const readyOf = async (app: FastifyInstance) => (await app.inject({ url: '/health/ready' })).json().cache as string;

async function startInstance(
  env: Record<string, string> = {},
  overrides: Partial<Config> = {},
): Promise<FastifyInstance> {
  const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', ...env });
  const app = (await buildApp({ ...config, ...onTopology(t.db.url), ...overrides })) as unknown as FastifyInstance;
  await app.ready();
  return app;
}
/** Runs fn with a second instance of the app on the same database, closed afterwards. */
async function withSecondInstance(
  env: Record<string, string>,
  fn: (other: FastifyInstance) => Promise<void>,
  overrides: Partial<Config> = {},
): Promise<void> {
  const other = await startInstance(env, overrides);
  try {
    await fn(other);
  } finally {
    await other.close();
  }
}

const listenerPids = async () =>
  (
    await sql(
      `SELECT pid, client_port FROM pg_stat_activity WHERE application_name = 'posts-api-cache' AND datname = current_database()`,
    )
  ).rows as { pid: number; client_port: number }[];

/** A second instance, and the pid and client socket of its listening connection, told apart from t.app's. */
async function withListenedInstance(
  env: Record<string, string>,
  fn: (other: FastifyInstance, listener: { pid: number; socket: Socket }) => Promise<void>,
): Promise<void> {
  const before = new Set((await listenerPids()).map((row) => row.pid));
  await withSecondInstance(env, async (other) => {
    const row = (await listenerPids()).find((r) => !before.has(r.pid))!;
    expect(row).toBeDefined();
    // The client end of that connection in this process: stopping its reads stalls the listener.
    const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
    const socket = handles.find(
      (h): h is Socket => (h as Socket).localPort === row.client_port && (h as Socket).remotePort !== undefined,
    );
    expect(socket).toBeDefined();
    await fn(other, { pid: row.pid, socket: socket! });
  });
}

/** Records the notifications that name changes (not heartbeats, confirmations, farewells) while fn runs. */
async function announcementsDuring(fn: () => Promise<void>): Promise<string[]> {
  const client = new pg.Client({ connectionString: t.db.url });
  const seen: string[] = [];
  client.on('notification', ({ payload = '' }) => {
    const [, first] = payload.split(' ');
    if (payload === '' || (first !== undefined && !first.startsWith('@'))) seen.push(payload);
  });
  await client.connect();
  try {
    await client.query(`LISTEN ${CHANGES_CHANNEL}`);
    await fn();
    await settle();
    // One more round trip of this client: whatever was sent before has arrived.
    await client.query('SELECT 1');
  } finally {
    await client.end();
  }
  return seen;
}

describe('hits', () => {
  it('a URL read twice is answered from the cache with the same body and headers, Content-Type exactly', async () => {
    const post = await createPost(t.app, ann, { title: 'Cached' });
    await settle();
    for (const url of [`/posts/${post.id}`, `/posts?author=${ann.user.id}&sort=-id&perPage=2`]) {
      const first = await prime(url);
      expect(first.headers['content-type']).toBe('application/json; charset=utf-8');
      await retitle(post.id, `Changed unnoticed ${url}`);
      const second = await get(url);

      expect(second.statusCode).toBe(200);
      expect(second.body).toBe(first.body);
      expect(second.json()).toMatchObject(
        url.includes('?') ? { data: [{ id: post.id, title: 'Cached' }] } : { id: post.id, title: 'Cached' },
      );
      for (const name of ['content-type', 'etag', 'link', 'cache-control', 'content-security-policy'] as const) {
        expect(second.headers[name]).toBe(first.headers[name]);
      }
      expect(second.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(second.headers['cache-control']).toBe('no-cache');
      expect(second.headers.etag).toMatch(/^"[^"]+"$/);
      expect(second.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
      await retitle(post.id, 'Cached');
    }
  });

  it('X-Cache says miss, miss, then hit on cacheable reads, and nothing on others', async () => {
    const post = await createPost(t.app, ann, { title: 'Counted' });
    await settle();
    const url = `/posts/${post.id}/comments?limit=3`;
    const seen = [];
    for (let i = 0; i < 3; i++) seen.push((await get(url)).headers['x-cache']);
    expect(seen).toEqual(['miss', 'miss', 'hit']);
    expect((await get('/users')).headers['x-cache']).toBeUndefined();
    expect((await t.app.inject({ method: 'HEAD', url })).headers['x-cache']).toBeUndefined();
  });

  it('a URL missed once is not stored (seen-twice admission)', async () => {
    const post = await createPost(t.app, ann, { title: 'Once' });
    await settle();
    expect(await titleOf(post.id)).toBe('Once');
    await retitle(post.id, 'Second');
    expect(await titleOf(post.id)).toBe('Second'); // not stored the first time: read from the database, now stored
    await retitle(post.id, 'Third');
    expect(await titleOf(post.id)).toBe('Second');
  });

  it('a hit answers If-None-Match itself: 304 with no body when it names the ETag, the page otherwise', async () => {
    const post = await createPost(t.app, ann, { title: 'Conditional' });
    await settle();
    const urls = [`/posts/${post.id}`, `/posts/${post.id}/comments`];
    const cached = await Promise.all(urls.map((url) => prime(url)));
    await sql('UPDATE posts SET version = version + 1, title = $2 WHERE id = $1', [post.id, 'Unnoticed'], true);
    for (const [i, url] of urls.entries()) {
      const etag = cached[i]!.headers.etag as string;
      const notModified = await get(url, t.app, { 'if-none-match': etag });
      expect(notModified.statusCode).toBe(304);
      expect(notModified.body).toBe('');
      expect(notModified.headers.etag).toBe(etag);
      expect(notModified.headers['cache-control']).toBe('no-cache');
      expect(notModified.headers['content-type']).toBeUndefined();
      const other = await get(url, t.app, { 'if-none-match': '"something-else"' });
      expect(other.statusCode).toBe(200);
      expect(other.body).toBe(cached[i]!.body);
    }
    // HEAD always reaches the route.
    const head = await t.app.inject({ method: 'HEAD', url: urls[0]! });
    expect(head.headers.etag).toBe(`"p${post.id}-2-0"`);
  });

  it('a bad token is still a 401 and errors are never cached', async () => {
    const post = await createPost(t.app, ann, { title: 'Guarded' });
    const url = `/posts/${post.id}`;
    await prime(url);
    const res = await get(url, t.app, { authorization: 'Bearer not-a-token' });
    expect(res.statusCode).toBe(401);

    const missing = '/posts/999999';
    expect((await prime(missing)).statusCode).toBe(404);
    await sql(
      `INSERT INTO posts (id, author_id, title, body) OVERRIDING SYSTEM VALUE VALUES (999999, $1, 'Late', 'text')`,
      [ann.user.id],
      true,
    );
    expect((await get(missing)).statusCode).toBe(200);
    await sql('DELETE FROM posts WHERE id = 999999', [], true);
  });
});

/**
 * A small world of cached pages: Ann's posts P and Q, Bob's post R, comments
 * c on P and d on Q. After priming, an unnoticed change touches every page;
 * then a write; a page whose body changed was evicted, one that did not was
 * served from the cache.
 */
async function world() {
  const P = await createPost(t.app, ann, { title: 'P' });
  const Q = await createPost(t.app, ann, { title: 'Q' });
  const R = await createPost(t.app, bob, { title: 'R' });
  const c = await createComment(t.app, bob, P.id);
  await createComment(t.app, bob, Q.id);
  await settle();
  const pages = {
    P: `/posts/${P.id}`,
    Q: `/posts/${Q.id}`,
    'P comments': `/posts/${P.id}/comments`,
    'Q comments': `/posts/${Q.id}/comments`,
    c: `/posts/${P.id}/comments/${c.id}`,
    'newest posts': '/posts?sort=-id&perPage=3',
    "Ann's posts": `/posts?author=${ann.user.id}`,
    "Ann's page": `/users/${ann.user.id}/posts`,
    "Bob's posts": `/posts?author=${bob.user.id}`,
    "Bob's page": `/users/${bob.user.id}/posts`,
    "Bob's posts by update": `/posts?author=${bob.user.id}&sort=-updatedAt`,
  };
  const primed = new Map<string, string>();
  for (const [name, url] of Object.entries(pages)) primed.set(name, (await prime(url)).body);
  await sql(`UPDATE posts SET title = title || ' ~' WHERE id = ANY($1)`, [[P.id, Q.id, R.id]], true);
  await sql(`UPDATE comments SET body = body || ' ~' WHERE post_id = ANY($1)`, [[P.id, Q.id]], true);

  /** The names of the pages no longer served from the cache. */
  async function evicted(): Promise<string[]> {
    const names: string[] = [];
    for (const [name, url] of Object.entries(pages)) if ((await get(url)).body !== primed.get(name)) names.push(name);
    return names.sort();
  }
  return { P, Q, R, c, evicted };
}
const ALL_PAGES = [
  'P',
  'Q',
  'P comments',
  'Q comments',
  'c',
  'newest posts',
  "Ann's posts",
  "Ann's page",
  "Bob's posts",
  "Bob's page",
  "Bob's posts by update",
];
const sorted = (names: string[]) => [...names].sort();
const patch = (url: string, who: SignedUp, payload: object, headers: Record<string, string> = {}, app = t.app) =>
  app.inject({ method: 'PATCH', url, headers: { ...who.auth, ...headers }, payload });

describe('what a write evicts', () => {
  it('a new comment: its post, its post’s comment lists and the lists showing that post; not other posts', async () => {
    const w = await world();
    await createComment(t.app, bob, w.P.id);
    expect(await w.evicted()).toEqual(sorted(['P', 'P comments', 'newest posts', "Ann's posts", "Ann's page"]));
  });

  it('a new post: the post lists (their totals), not single posts or comment lists; not another author’s page', async () => {
    const w = await world();
    await createPost(t.app, ann, { title: 'S' });
    // `/posts?author=` lists share the `posts` scope: filters are not tracked.
    expect(await w.evicted()).toEqual(
      sorted(['newest posts', "Ann's posts", "Ann's page", "Bob's posts", "Bob's posts by update"]),
    );
  });

  it('a PATCH or PUT of a post: the post, the lists holding it, and the lists ordered by what they change', async () => {
    for (const method of ['PATCH', 'PUT'] as const) {
      const w = await world();
      const changed = await t.app.inject({
        method,
        url: `/posts/${w.P.id}`,
        headers: ann.auth,
        payload: { title: 'P2', body: 'new' },
      });
      expect(changed.statusCode).toBe(200);
      expect(await w.evicted()).toEqual(
        sorted(['P', 'newest posts', "Ann's posts", "Ann's page", "Bob's posts by update"]),
      );
      const read = await get(`/posts/${w.P.id}`);
      expect(read.json()).toMatchObject({ title: 'P2', body: 'new' });
      expect(read.headers.etag).toBe(changed.headers.etag);
    }
  });

  it('a DELETE of a post: the post, its comments and their lists, every post list', async () => {
    const w = await world();
    expect((await t.app.inject({ method: 'DELETE', url: `/posts/${w.P.id}`, headers: ann.auth })).statusCode).toBe(204);
    expect(await w.evicted()).toEqual(
      sorted([
        'P',
        'P comments',
        'c',
        'newest posts',
        "Ann's posts",
        "Ann's page",
        "Bob's posts",
        "Bob's posts by update",
      ]),
    );
  });

  it('a PATCH of a comment: the comment and its lists; a DELETE: also its post and the lists showing it', async () => {
    let w = await world();
    expect((await patch(`/posts/${w.P.id}/comments/${w.c.id}`, bob, { body: 'edited' })).statusCode).toBe(200);
    expect(await w.evicted()).toEqual(sorted(['c', 'P comments']));

    w = await world();
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/posts/${w.P.id}/comments/${w.c.id}`, headers: bob.auth }))
        .statusCode,
    ).toBe(204);
    expect(await w.evicted()).toEqual(sorted(['P', 'P comments', 'c', 'newest posts', "Ann's posts", "Ann's page"]));
  });

  it('a write through SQL (triggers on) flushes everything through its notification', async () => {
    const w = await world();
    await sql('UPDATE posts SET body = body WHERE id = $1', [w.R.id]);
    await waitUntil('the SQL change shows', async () => (await w.evicted()).length === ALL_PAGES.length, 40, 25);
  });
});

describe('a request that changed nothing evicts nothing and notifies nobody', () => {
  const key = { 'idempotency-key': 'evicts-nothing-1' };
  let replayed = 0;
  const rejected: [string, (w: Awaited<ReturnType<typeof world>>) => Promise<number>][] = [
    [
      '401',
      async (w) =>
        (await t.app.inject({ method: 'POST', url: `/posts/${w.P.id}/comments`, payload: { body: 'x' } })).statusCode,
    ],
    ['403', async (w) => (await patch(`/posts/${w.P.id}`, bob, { title: 'not yours' })).statusCode],
    ['404', async () => (await patch('/posts/999999', ann, { title: 'nothing' })).statusCode],
    [
      '412',
      async (w) => (await patch(`/posts/${w.P.id}`, ann, { title: 'stale' }, { 'if-match': '"p0-0-0"' })).statusCode,
    ],
    ['422', async (w) => (await patch(`/posts/${w.P.id}`, ann, { title: '' })).statusCode],
    [
      '409',
      async (w) => {
        // The key's first request is still running: its advisory lock is held.
        const holder = new pg.Client({ connectionString: t.db.url });
        await holder.connect();
        try {
          await holder.query('BEGIN');
          await holder.query('SELECT pg_advisory_xact_lock($1::bigint)', [
            idempotencyLockId(`user:${bob.user.id}`, 'in-flight'),
          ]);
          const res = await t.app.inject({
            method: 'POST',
            url: `/posts/${w.P.id}/comments`,
            headers: { ...bob.auth, 'idempotency-key': 'in-flight' },
            payload: { body: 'x' },
          });
          return res.statusCode;
        } finally {
          await holder.end();
        }
      },
    ],
    [
      '429',
      async (w) => {
        let status = 0;
        await withSecondInstance({ RATE_LIMIT_MAX: '1' }, async (other) => {
          await other.inject({ url: '/users/me', headers: bob.auth });
          status = (
            await other.inject({
              method: 'POST',
              url: `/posts/${w.P.id}/comments`,
              headers: bob.auth,
              payload: { body: 'x' },
            })
          ).statusCode;
        });
        return status;
      },
    ],
    [
      'an idempotent replay (201)',
      async () => {
        const res = await t.app.inject({
          method: 'POST',
          url: `/posts/${replayed}/comments`,
          headers: { ...bob.auth, ...key },
          payload: { body: 'once' },
        });
        expect(res.headers['idempotent-replayed']).toBe('true');
        return res.statusCode;
      },
    ],
    ['an empty PATCH (200)', async (w) => (await patch(`/posts/${w.P.id}`, ann, {})).statusCode],
  ];

  beforeAll(async () => {
    const post = await createPost(t.app, ann, { title: 'For the replay' });
    replayed = post.id;
    const first = await t.app.inject({
      method: 'POST',
      url: `/posts/${post.id}/comments`,
      headers: { ...bob.auth, ...key },
      payload: { body: 'once' },
    });
    expect(first.statusCode).toBe(201);
  });

  it.each(rejected)('%s', async (name, request) => {
    const w = await world();
    let status = 0;
    const announced = await announcementsDuring(async () => {
      status = await request(w);
    });
    expect(String(status)).toBe(name.match(/\d{3}/)![0]);
    expect(announced).toEqual([]);
    expect(await w.evicted()).toEqual([]);
  });
});

describe('bounded staleness', () => {
  it('no entry is served past RESPONSE_CACHE_MAX_AGE_MS', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MAX_AGE_MS: '400' }, async (other) => {
      const post = await createPost(t.app, ann, { title: 'Young' });
      await settle(other);
      await prime(`/posts/${post.id}`, other);
      await retitle(post.id, 'Old enough');
      expect(await titleOf(post.id, other)).toBe('Young');
      await sleep(450);
      expect(await titleOf(post.id, other)).toBe('Old enough');
    });
  });

  it('a lost listening connection: reads go to the database at once, readiness says bypassed; it reconnects and caches again', async () => {
    await withListenedInstance({}, async (other, listener) => {
      const post = await createPost(t.app, ann, { title: 'v1' });
      await settle(other);
      await prime(`/posts/${post.id}`, other);
      await retitle(post.id, 'v2');
      expect(await titleOf(post.id, other)).toBe('v1');
      expect(await readyOf(other)).toBe('on');

      await sql('SELECT pg_terminate_backend($1)', [listener.pid]);
      await waitUntil('the cache is bypassed', async () => (await readyOf(other)) === 'bypassed', 40, 25);
      const bypassed = await get(`/posts/${post.id}`, other);
      expect(bypassed.json().title).toBe('v2');
      expect(bypassed.headers['x-cache']).toBe('bypass');
      const ready = await other.inject({ url: '/health/ready' });
      expect(ready.statusCode).toBe(200);
      expect(ready.json()).toEqual({
        status: 'ok',
        cache: 'bypassed',
        eventBacklog: { events: expect.any(Number), oldestSeconds: expect.any(Number) },
      });

      await waitUntil('the cache listens again', async () => (await readyOf(other)) === 'on', 100, 50);
      await prime(`/posts/${post.id}`, other);
      await retitle(post.id, 'v3');
      expect(await titleOf(post.id, other)).toBe('v2');
    });
  });

  it('a stalled listening connection: caught by the heartbeat, reads go to the database, readiness says bypassed', async () => {
    await withListenedInstance({}, async (other, listener) => {
      const post = await createPost(t.app, ann, { title: 'Before the stall' });
      await settle(other);
      await prime(`/posts/${post.id}`, other);
      listener.socket.pause();
      const patched = await patch(`/posts/${post.id}`, ann, { title: 'During the stall' });
      expect(patched.statusCode).toBe(200);
      const started = Date.now();
      await waitUntil(
        'the stalled instance serves the change',
        async () => (await titleOf(post.id, other)) === 'During the stall',
        100,
        25,
      );
      // A heartbeat every second with a second to come back.
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(await readyOf(other)).toBe('bypassed');
      await waitUntil('the cache listens again', async () => (await readyOf(other)) === 'on', 100, 50);
    });
  });

  it("a write's answer waits at most a second for its announcement, then goes anyway", async () => {
    await withListenedInstance({}, async (other, listener) => {
      const post = await createPost(t.app, ann, { title: 'Timely' });
      await settle(other);
      listener.socket.pause();
      const started = Date.now();
      const patched = await patch(`/posts/${post.id}`, ann, { title: 'Answered' }, {}, other);
      expect(patched.statusCode).toBe(200);
      expect(patched.json().title).toBe('Answered');
      expect(Date.now() - started).toBeLessThan(1_800);
      expect(await readyOf(other)).toBe('bypassed');
      // t.app heard it (the announcement was sent before the listener was found stalled).
      expect(await titleOf(post.id)).toBe('Answered');
    });
  });
});

describe('across instances', () => {
  it('read-your-writes: a write answered by one instance is read at once on the other, every time', async () => {
    const a = await startInstance();
    await withSecondInstance({}, async (b) => {
      const [baseA, baseB] = await Promise.all([
        a.listen({ port: 0, host: '127.0.0.1' }),
        b.listen({ port: 0, host: '127.0.0.1' }),
      ]);
      const post = await createPost(t.app, ann, { title: 'Round 0' });
      const url = `/posts/${post.id}`;
      const json = { 'content-type': 'application/json', ...ann.auth };
      const stale: string[] = [];
      for (let i = 1; i <= 60; i++) {
        await fetch(baseB + url);
        await fetch(baseB + url); // stored on B
        if (i % 2) {
          const res = await fetch(baseA + url, {
            method: 'PATCH',
            headers: json,
            body: JSON.stringify({ title: `Round ${i}` }),
          });
          expect(res.status).toBe(200);
          const read = (await (await fetch(baseB + url)).json()) as { title: string };
          if (read.title !== `Round ${i}`) stale.push(`${i}: ${read.title}`);
        } else {
          const res = await fetch(`${baseA}${url}/comments`, {
            method: 'POST',
            headers: json,
            body: JSON.stringify({ body: `c${i}` }),
          });
          expect(res.status).toBe(201);
          const read = (await (await fetch(baseB + url)).json()) as { commentCount: number };
          if (read.commentCount !== i / 2) stale.push(`${i}: ${read.commentCount} comments`);
        }
      }
      expect(stale).toEqual([]);
    }).finally(() => a.close());
  });

  it('RESPONSE_CACHE_MB=0 turns it off, and its writes are still announced to the instances that cache', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '0' }, async (other) => {
      const post = await createPost(t.app, ann, { title: 'Uncached' });
      await prime(`/posts/${post.id}`, other);
      await retitle(post.id, 'Seen at once');
      expect(await titleOf(post.id, other)).toBe('Seen at once');
      expect(await readyOf(other)).toBe('off');
      // t.app's only; with replicas a cache-less instance listens too (read-your-writes, src/plugins/read-routing.ts).
      expect(await listenerPids()).toHaveLength(other.replicas ? 2 : 1);

      await prime(`/posts/${post.id}`);
      const patched = await patch(`/posts/${post.id}`, ann, { title: 'From a cache-less instance' }, {}, other);
      expect(patched.statusCode).toBe(200);
      await waitUntil(
        'the caching instance shows the change',
        async () => (await titleOf(post.id)) === 'From a cache-less instance',
        40,
        25,
      );
      // It confirms nothing (or, with replicas, at once), so no one waits for it the full second.
      const started = Date.now();
      expect((await patch(`/posts/${post.id}`, ann, { title: 'Not waiting' })).statusCode).toBe(200);
      expect(Date.now() - started).toBeLessThan(700);
    });
  });
});

describe('confirmations', () => {
  it('an instance with the cache off waits for no confirmation, so none is sent for its announcements', async () => {
    await withSecondInstance(
      { RESPONSE_CACHE_MB: '0' },
      async (other) => {
        const post = await createPost(t.app, ann, { title: 'Unconfirmed' });
        await settle();
        // Notifications come only on a direct connection, never through PgBouncer in transaction mode.
        const { databaseListenUrl, databaseUrl } = onTopology(t.db.url);
        const client = new pg.Client({ connectionString: databaseListenUrl ?? databaseUrl });
        const payloads: string[] = [];
        client.on('notification', ({ payload = '' }) => payloads.push(payload));
        await client.connect();
        try {
          await client.query(`LISTEN ${CHANGES_CHANNEL}`);
          expect((await patch(`/posts/${post.id}`, ann, { title: 'From the pool' }, {}, other)).statusCode).toBe(200);
          expect((await patch(`/posts/${post.id}`, ann, { title: 'From the listener' })).statusCode).toBe(200);
          await settle();
          await client.query('SELECT 1');
        } finally {
          await client.end();
        }
        const changes = payloads.filter((p) => p.split(' ').includes(`posts/${post.id}`));
        expect(changes).toHaveLength(2);
        const [poolFence, listenerFence] = changes.map((p) => p.split(' ')[0]!);
        expect(poolFence).toMatch(/~$/);
        expect(listenerFence).not.toMatch(/~$/);
        // t.app evicted both (it shows the last title) but confirmed only what the listening instance sent.
        expect(payloads.filter((p) => p.endsWith(` @${poolFence}`))).toEqual([]);
        expect(await titleOf(post.id)).toBe('From the listener');
        // Without replicas: an instance with the cache off and replicas listens (its writers' positions must reach every instance).
      },
      { databaseReadUrls: [] },
    );
  });
});

describe('limits', () => {
  it('the least recently used answers make room for new ones; long URLs count against the budget', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '1' }, async (other) => {
      const used = await createPost(t.app, ann, { title: 'Used' });
      const unused = await createPost(t.app, ann, { title: 'Unused' });
      await settle(other);
      await prime(`/posts/${used.id}`, other);
      await prime(`/posts/${unused.id}`, other);
      // 100 000-character URLs (empty query pairs are skipped): ten fill the budget.
      const longUrl = (k: number) => `/posts?${'&'.repeat(100_000)}sort=-id&perPage=${k + 1}`;
      for (let k = 0; k < 8; k++) expect((await prime(longUrl(k), other)).statusCode).toBe(200);
      await titleOf(used.id, other);
      for (let k = 8; k < 11; k++) expect((await prime(longUrl(k), other)).statusCode).toBe(200);

      await retitle(used.id, 'Used, changed');
      await retitle(unused.id, 'Unused, changed');
      expect(await titleOf(unused.id, other)).toBe('Unused, changed');
      expect(await titleOf(used.id, other)).toBe('Used');
    });
  });

  it('an entry counts what it holds besides its body: 1 000 small posts do not all fit in 1 MiB', async () => {
    // About 1.2 KiB each on the heap, though body, URL, headers and tag are ~0.4 KiB: counted so, all would fit.
    await withSecondInstance({ RESPONSE_CACHE_MB: '1', RESPONSE_CACHE_MAX_AGE_MS: '600000' }, async (other) => {
      const { rows } = await sql(
        `INSERT INTO posts (author_id, title, body) SELECT $1, 'Budget', 'text' FROM generate_series(1, 1000) RETURNING id`,
        [ann.user.id],
      );
      const ids = rows.map((row: { id: string }) => Number(row.id));
      await settle(other);
      for (const id of ids) await prime(`/posts/${id}`, other);
      await sql('UPDATE posts SET title = $2 WHERE id = ANY($1)', [ids, 'Budget, changed'], true);
      let kept = 0;
      // Newest first: a miss stores itself and evicts the least recently used, already counted.
      for (const id of ids.reverse()) if ((await titleOf(id, other)) === 'Budget') kept += 1;
      expect(kept).toBeGreaterThan(400);
      expect(kept).toBeLessThan(900);
    });
  });

  it('an answer over an eighth of the budget is not cached', async () => {
    await withSecondInstance({ RESPONSE_CACHE_MB: '1' }, async (other) => {
      const big = 'x'.repeat(50_000);
      const post = await createPost(t.app, ann, { title: 'Big' });
      for (let i = 0; i < 2; i++) await createPost(t.app, ann, { title: `Big ${i}` });
      await sql('UPDATE posts SET body = $2 WHERE author_id = $1', [ann.user.id, big], true);
      const url = `/posts?author=${ann.user.id}&sort=-id&perPage=3`;
      await settle(other);

      const first = await prime(url, other);
      expect(first.body.length).toBeGreaterThan(1_048_576 / 8);
      await sql('UPDATE posts SET title = $2 WHERE author_id = $1', [ann.user.id, 'Renamed'], true);
      expect((await get(url, other)).json().data.map((p: { title: string }) => p.title)).toEqual([
        'Renamed',
        'Renamed',
        'Renamed',
      ]);
      // A small answer on the same instance is cached.
      await prime(`/posts/${post.id}`, other);
      await retitle(post.id, 'Small change');
      expect(await titleOf(post.id, other)).toBe('Renamed');
    });
  });
});
