/**
 * GET /events (docs/api.md §12): the event object, cursor pages with
 * nextCursor and Link, the type= and post= filters and their 422, no gaps and
 * no repeats when transactions commit out of order (a held transaction, then
 * 32 concurrent writers under a following consumer), retention: the purge
 * and the 410 for a cursor older than what is kept, and events the document
 * does not describe (a newer instance's type), served as stored.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { onTopology } from '../helpers/database.js';
import { signUp, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';
import { expect422, expectError, iso } from '../helpers/expect.js';
import { eventsRepository } from '../../src/events/repository.js';
import { VERSION } from '../../src/root.js';

let t: TestApp;
let ann: SignedUp;
let bob: SignedUp;

interface Event {
  id: number;
  type: string;
  createdAt: string;
  resource: { type: string; id: number; path: string };
  data: Record<string, unknown>;
}
interface Page {
  data: Event[];
  limit: number;
  hasMore: boolean;
  nextCursor: number | null;
  prevCursor: null;
}

beforeAll(async () => {
  t = await startTestApp();
  ann = await signUp(t.app, { name: 'Ann' });
  bob = await signUp(t.app, { name: 'Bob' });
});
afterAll(() => t.close());

const get = (url: string) => t.app.inject({ method: 'GET', url });
async function page(url: string): Promise<Page> {
  const res = await get(url);
  expect(res.statusCode).toBe(200);
  return res.json();
}
async function createPost(who: SignedUp, title: string): Promise<{ id: number }> {
  const res = await t.app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload: { title, body: 'b' } });
  expect(res.statusCode).toBe(201);
  return res.json();
}
/** Every event after `after`, following nextCursor until hasMore is false. */
async function readOn(after: number, query = ''): Promise<{ events: Event[]; cursor: number }> {
  const events: Event[] = [];
  let cursor = after;
  for (;;) {
    const p = await page(`/events?after=${cursor}&limit=100${query}`);
    events.push(...p.data);
    cursor = p.nextCursor ?? cursor;
    if (!p.hasMore) return { events, cursor };
  }
}
const head = async () => (await readOn(0)).cursor;

describe('the feed', () => {
  it('lists every event from the start: the event object, nextCursor, Link, ETag', async () => {
    const first = await page('/events?limit=2');
    const { email: _a, ...annShown } = ann.user;
    const { email: _b, ...bobShown } = bob.user;
    expect(first).toEqual({
      data: [
        {
          id: 1,
          type: 'user.created',
          createdAt: iso,
          resource: { type: 'user', id: ann.user.id, path: `/users/${ann.user.id}` },
          data: annShown,
        },
        {
          id: 2,
          type: 'user.created',
          createdAt: iso,
          resource: { type: 'user', id: bob.user.id, path: `/users/${bob.user.id}` },
          data: bobShown,
        },
      ],
      limit: 2,
      hasMore: false,
      nextCursor: 2,
      prevCursor: null,
    });
    const res = await get('/events?limit=2');
    expect(res.headers.link).toBe('</events?limit=2&after=2>; rel="next"');
    expect(res.headers['cache-control']).toBe('public, max-age=0, s-maxage=1');
    expect(res.headers.etag).toMatch(/^"/);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');

    const post = await createPost(ann, 'first');
    const next = await page('/events?limit=2&after=2');
    expect(next).toEqual({
      data: [
        {
          id: 3,
          type: 'post.created',
          createdAt: iso,
          resource: { type: 'post', id: post.id, path: `/posts/${post.id}` },
          data: post,
        },
      ],
      limit: 2,
      hasMore: false,
      nextCursor: 3,
      prevCursor: null,
    });
    // An empty page keeps the cursor where it was.
    expect(await page('/events?after=3')).toEqual({
      data: [],
      limit: 20,
      hasMore: false,
      nextCursor: 3,
      prevCursor: null,
    });
  });

  it('hasMore while a full page is followed by more', async () => {
    const p = await page('/events?limit=1');
    expect(p).toMatchObject({ hasMore: true, nextCursor: 1 });
    expect(p.data.map((e) => e.id)).toEqual([1]);
  });

  it("a comment's path is under its post; type= and post= filter", async () => {
    const start = await head();
    const mine = await createPost(ann, 'mine');
    const other = await createPost(bob, 'other');
    const comment = (
      await t.app.inject({
        method: 'POST',
        url: `/posts/${mine.id}/comments`,
        headers: bob.auth,
        payload: { body: 'hi' },
      })
    ).json();
    await t.app.inject({
      method: 'POST',
      url: `/posts/${other.id}/comments`,
      headers: ann.auth,
      payload: { body: 'there' },
    });

    const ofMine = (await readOn(start, `&post=${mine.id}`)).events;
    expect(ofMine.map((e) => [e.type, e.resource.id])).toEqual([
      ['post.created', mine.id],
      ['comment.created', comment.id],
    ]);
    expect(ofMine[1]!.resource.path).toBe(`/posts/${mine.id}/comments/${comment.id}`);

    const comments = (await readOn(start, '&type=comment.created,post.deleted')).events;
    expect(comments.map((e) => e.type)).toEqual(['comment.created', 'comment.created']);
    // The next link keeps the filters.
    const res = await get(`/events?after=${start}&limit=1&type=comment.created`);
    expect(res.headers.link).toBe(`</events?after=${comments[0]!.id}&limit=1&type=comment.created>; rel="next"`);
  });

  it('an unknown type, a repeated type, a bad after or limit: 422 with the uniform body', async () => {
    expect422(await get('/events?type=post.created,post.exploded'), {
      type: [expect.stringContaining('must be a comma-separated list of distinct event types among post.created')],
    });
    expect422(await get('/events?after=-1'), {
      after: ['must be written in plain decimal digits (no sign, leading zero, exponent or spaces)'],
    });
    expect422(await get('/events?limit=101'), { limit: ['must be at most 100'] });
    expect422(await get('/events?page=2'), { page: [expect.any(String)] });
  });

  it('an empty page read from the start (after=0): nextCursor null, as without after', async () => {
    for (const url of ['/events?after=0&type=user.deleted', '/events?type=user.deleted', '/events?after=0&post=999999'])
      expect(await page(url), url).toEqual({ data: [], limit: 20, hasMore: false, nextCursor: null, prevCursor: null });
  });

  it('a cursor beyond the newest event ever numbered is a 422 that says so, not an empty page', async () => {
    await createPost(ann, 'something numbered');
    const newest = await head();
    expect((await page(`/events?after=${newest}`)).nextCursor).toBe(newest);
    expect422(
      await get('/events?after=99999999'),
      { after: [`is beyond the newest event (${newest}): the feed was reset, or this is not a cursor it gave`] },
      'the cursor is ahead of the feed: resynchronise from the lists',
    );
  });
});

describe('the 422 in the OpenAPI document', () => {
  interface Operation {
    parameters: { name: string; in: string; description?: string }[];
    responses: Record<string, { description: string }>;
  }
  const operations = async () => {
    const doc = (await get('/openapi.json')).json<{ paths: Record<string, { get: Operation }> }>();
    return ['/events', '/events/stream'].map((path) => ({ path, operation: doc.paths[path]!.get }));
  };

  it("is /events' own: its parameters and a cursor ahead of the feed, never page, perPage or before", async () => {
    for (const { path, operation } of await operations()) {
      const description = operation.responses['422']!.description;
      expect(description, path).toMatch(/after/);
      expect(description, path).toMatch(/type/);
      expect(description, path).toMatch(/beyond the newest event/);
      expect(description, path).not.toMatch(/\bpage\b|perPage|before/);
    }
    const [feed] = await operations();
    expect(feed!.operation.responses['422']!.description).toMatch(/limit/);
  });

  it("names after's 422 (a cursor ahead) and 410 (a cursor purged) in after's description", async () => {
    for (const { path, operation } of await operations()) {
      const after = operation.parameters.find((p) => p.in === 'query' && p.name === 'after')!;
      expect(after.description, path).toMatch(/beyond the newest event[^;]*422/);
      expect(after.description, path).toMatch(/410/);
    }
  });
});

describe('no gaps, no repeats', () => {
  it('a transaction held open: what commits meanwhile is listed, the held one follows it once committed', async () => {
    const post = await createPost(ann, 'to be held');
    const start = await head();
    const held = new pg.Client({ connectionString: t.db.url });
    await held.connect();
    try {
      await held.query('BEGIN');
      await held.query("UPDATE posts SET title = 'held', updated_at = now() WHERE id = $1", [post.id]);
      const later = await createPost(bob, 'later');

      const before = await readOn(start);
      expect(before.events.map((e) => [e.type, e.resource.id])).toEqual([['post.created', later.id]]);
      expect(before.events[0]!.id).toBe(start + 1);

      await held.query('COMMIT');
      const after = await readOn(before.cursor);
      expect(after.events.map((e) => [e.id, e.type, e.resource.id, e.data.title])).toEqual([
        [start + 2, 'post.updated', post.id, 'held'],
      ]);
      expect((await readOn(after.cursor)).events).toEqual([]);
    } finally {
      await held.end();
    }
  });

  it('32 concurrent writers, some holding their transactions: a consumer following nextCursor sees each event once, in order', async () => {
    const start = await head();
    const clients = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const c = new pg.Client({ connectionString: t.db.url });
        await c.connect();
        return c;
      }),
    );
    let writing = true;
    const seen: Event[] = [];
    const consumer = (async () => {
      let cursor = start;
      while (writing) {
        const p = await page(`/events?after=${cursor}&limit=100`);
        seen.push(...p.data);
        cursor = p.nextCursor ?? cursor;
        if (!p.hasMore) await sleep(5);
      }
      seen.push(...(await readOn(cursor)).events);
    })();
    const api = Array.from({ length: 24 }, async (_, w) => {
      const who = w % 2 ? ann : bob;
      for (let i = 0; i < 30; i++) {
        const post = await createPost(who, `w${w}-${i}`);
        if (i % 3 === 0) {
          await t.app.inject({
            method: 'PATCH',
            url: `/posts/${post.id}`,
            headers: who.auth,
            payload: { title: `w${w}-${i}!` },
          });
        }
      }
    });
    const direct = clients.map(async (c) => {
      for (let i = 0; i < 20; i++) {
        await c.query('BEGIN');
        await c.query("INSERT INTO posts (author_id, title, body) VALUES ($1, 'direct', 'x'), ($1, 'direct', 'y')", [
          ann.user.id,
        ]);
        await sleep(Math.random() * 30);
        await c.query('COMMIT');
      }
    });
    await Promise.all([...api, ...direct]);
    writing = false;
    await consumer;
    await Promise.all(clients.map((c) => c.end()));

    const { rows } = await t.app.db.query<{ n: number }>('SELECT count(*)::int AS n FROM events WHERE id > $1', [
      start,
    ]);
    const expected = 24 * 30 + 24 * 10 + 8 * 20 * 2;
    expect(rows[0]!.n).toBe(expected);
    expect(seen.map((e) => e.id)).toEqual(Array.from({ length: expected }, (_, i) => start + 1 + i));
  }, 60_000);
});

describe('the sequencer held up', () => {
  it('readiness stays 200; the feed lists nothing unnumbered, then all of it once numbered', async () => {
    const start = await head();
    const events = eventsRepository(t.app.db);
    // On the server itself: a session-level lock taken through a pooler outlives the client.
    const blocker = new pg.Client({ connectionString: onTopology(t.db.url).databaseListenUrl ?? t.db.url });
    await blocker.connect();
    try {
      // The lock number_events() takes: while another session holds it, nothing is numbered.
      await blocker.query('SELECT pg_advisory_lock(27, 1)');
      await createPost(ann, 'waits');
      await createPost(bob, 'waits too');
      const ready = await get('/health/ready');
      expect(ready.statusCode).toBe(200);
      expect(ready.json()).toEqual({ status: 'ok', version: VERSION });
      // What the posts_api_events_unnumbered* gauges show.
      expect(await events.backlog()).toEqual({ unnumbered: 2, oldestSeconds: expect.any(Number) });
      expect(await page(`/events?after=${start}`)).toEqual({
        data: [],
        limit: 20,
        hasMore: false,
        nextCursor: start,
        prevCursor: null,
      });
    } finally {
      await blocker.end();
    }
    await expect
      .poll(async () => (await page(`/events?after=${start}`)).data.map((e) => e.data.title))
      .toEqual(['waits', 'waits too']);
    expect(await events.backlog()).toEqual({ unnumbered: 0, oldestSeconds: 0 });
  });
});

describe('a page far from the newest event', () => {
  it('is read along the id index, not by sorting every event after the cursor', async () => {
    // Data as a deleted post's events hold it (docs/api.md §12): later tests read these through the documented feed.
    await t.app.db.query(
      `INSERT INTO events (id, type, resource_type, resource_id, post_id, data)
       SELECT m.top + g, 'post.created', 'post', 1, 1, '{"id": 1}'::jsonb
       FROM (SELECT coalesce(max(id), 0) AS top FROM events) m, generate_series(1, 20000) g`,
    );
    await t.app.db.query('ANALYZE events');
    const sent: { text: string; values?: unknown[] }[] = [];
    const capturing = {
      query: (statement: { text: string; values?: unknown[] }) => {
        sent.push(statement);
        return t.app.db.query(statement);
      },
    } as unknown as Parameters<typeof eventsRepository>[0];
    const head = await eventsRepository(t.app.db).head();
    expect(await eventsRepository(capturing).page(head - 15000, 21)).toHaveLength(21);
    const { rows } = await t.app.db.query<{ 'QUERY PLAN': unknown }>(
      `EXPLAIN (FORMAT JSON) ${sent[0]!.text}`,
      sent[0]!.values,
    );
    // Before the fix, ORDER BY named the float8 output column: a Sort over every later event.
    expect(JSON.stringify(rows[0]!['QUERY PLAN'])).not.toContain('"Node Type":"Sort"');
  });
});

describe('retention', () => {
  it('purges events past EVENT_RETENTION, oldest first, never the newest; an older cursor is a 410', async () => {
    const last = await head();
    const events = eventsRepository(t.app.db);
    await t.app.db.query("UPDATE events SET created_at = now() - interval '8 days' WHERE id <= 10");
    expect(await events.purgeExpired(604_800, 4)).toBe(4);
    expect(await events.purgeExpired(604_800, 500)).toBe(6);
    expect(await events.purgeExpired(604_800, 500)).toBe(0);
    expect((await events.bounds()).floor).toBe(10);

    expectError(
      await get('/events?after=9'),
      410,
      'gone',
      'events up to 10 have been purged (EVENT_RETENTION); event 9 is older: resynchronise from the lists',
    );
    expect((await page('/events?after=10&limit=1')).data.map((e) => e.id)).toEqual([11]);
    // From the start (no after, or 0): the oldest kept.
    expect((await page('/events?limit=1')).data.map((e) => e.id)).toEqual([11]);
    expect((await page('/events?limit=1&after=0')).data.map((e) => e.id)).toEqual([11]);

    // Everything old: all but the newest go, and ids go on from it.
    await t.app.db.query("UPDATE events SET created_at = now() - interval '8 days'");
    while ((await events.purgeExpired(604_800, 500)) > 0);
    expect((await page(`/events?after=${last - 1}`)).data.map((e) => e.id)).toEqual([last]);
    await createPost(ann, 'after the purge');
    expect((await page(`/events?after=${last}`)).data.map((e) => e.id)).toEqual([last + 1]);
  });
});

// Last in the file: what it writes is, rightly, not what the document describes, which every inject checks.
describe('events the document does not describe', () => {
  it('are served as stored: a type a newer instance serves, data of an older shape', async () => {
    const { rows } = await t.app.db.query<{ id: number }>(
      `INSERT INTO events (id, type, resource_type, resource_id, post_id, data)
       SELECT top + g, (ARRAY['tag.created', 'post.updated'])[g], (ARRAY['tag', 'post'])[g], 5, NULL,
         (ARRAY['{"id": 5, "name": "news"}', '{"id": 5, "title": "no body yet"}'])[g]::jsonb
       FROM (SELECT max(id) AS top FROM events) m, generate_series(1, 2) g RETURNING id::float8 AS id`,
    );
    // Over HTTP, past the document check of app.inject.
    const base = await t.app.listen({ port: 0, host: '127.0.0.1' });
    const res = await fetch(`${base}/events?after=${rows[0]!.id - 1}`);
    expect(res.status).toBe(200);
    const { data } = (await res.json()) as Page;
    expect(data.map(({ type, resource, data }) => ({ type, path: resource.path, data }))).toEqual([
      { type: 'tag.created', path: '/tag/5', data: { id: 5, name: 'news' } },
      { type: 'post.updated', path: '/posts/5', data: { id: 5, title: 'no body yet' } },
    ]);
  });
});
