/**
 * GET /events/stream (docs/api.md §12), over real HTTP: an event written
 * through instance A reaches a stream open on instance B (same database)
 * within a second; Last-Event-ID resumes without loss; filters; heartbeats;
 * MAX_STREAMS is a 503 with Retry-After; a cursor past retention is a 410;
 * closing the app ends its streams.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { onTopology } from '../helpers/database.js';
import { signUp, startTestApp, testConfig, type SignedUp, type TestApp, type Tuning } from '../helpers/factories.js';
import { expect422, expectError, iso } from '../helpers/expect.js';

let t: TestApp;
let b: FastifyInstance;
let bBase: string;
let ann: SignedUp;
const opened: SseClient[] = [];

/** A second instance on the same database, listening on a real port. */
async function instance(
  env: Record<string, string> = {},
  tuning: Tuning = {},
): Promise<{ app: FastifyInstance; base: string }> {
  const app = (await buildApp({ ...testConfig(env, tuning), ...onTopology(t.db.url) })) as unknown as FastifyInstance;
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

interface Frame {
  id: string;
  event: string;
  data: Record<string, unknown>;
}

class SseClient {
  frames: Frame[] = [];
  heartbeats = 0;
  ended = false;
  private buffer = '';
  private waiters: (() => void)[] = [];
  constructor(readonly res: IncomingMessage) {
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => this.take(chunk));
    res.on('end', () => this.settle(() => (this.ended = true)));
    res.on('error', () => this.settle(() => (this.ended = true)));
  }
  private settle(change: () => void) {
    change();
    for (const waiter of this.waiters.splice(0)) waiter();
  }
  private take(chunk: string) {
    this.buffer += chunk;
    let end: number;
    while ((end = this.buffer.indexOf('\n\n')) !== -1) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      if (block === ': heartbeat') this.settle(() => this.heartbeats++);
      const fields = Object.fromEntries(
        block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 2)]),
      );
      if (fields.data !== undefined)
        this.settle(() => this.frames.push({ id: fields.id!, event: fields.event!, data: JSON.parse(fields.data!) }));
    }
  }
  /** Waits until `done()` holds, at most `ms` (long enough for a loaded machine). */
  async until(done: () => boolean, ms = 15_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out; frames: ${JSON.stringify(this.frames.map((f) => f.id))}`);
      await Promise.race([new Promise<void>((resolve) => this.waiters.push(resolve)), sleep(50)]);
    }
  }
  close() {
    this.res.destroy();
  }
}

function openStream(base: string, path: string, headers: Record<string, string> = {}): Promise<SseClient> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      const client = new SseClient(res);
      opened.push(client);
      resolve(client);
    });
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  t = await startTestApp();
  ann = await signUp(t.app, { name: 'Ann' });
  ({ app: b, base: bBase } = await instance());
});
afterAll(async () => {
  for (const client of opened) client.close();
  await b.close();
  await t.close();
});

async function createPost(title: string): Promise<{ id: number }> {
  const res = await t.app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title, body: 'b' } });
  expect(res.statusCode).toBe(201);
  return res.json();
}

describe('a stream', () => {
  it('gets an event written through another instance, as id, event and data lines', async () => {
    const stream = await openStream(bBase, '/events/stream');
    expect(stream.res.statusCode).toBe(200);
    expect(stream.res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(stream.res.headers['cache-control']).toBe('no-store');
    expect(stream.res.headers['x-request-id']).toBeTypeOf('string');
    // Let it go live, then write through instance A.
    await sleep(200);
    for (let round = 0; round < 3; round++) {
      const post = await createPost(`live ${round}`);
      await stream.until(() => stream.frames.some((f) => (f.data.data as { id: number }).id === post.id));
      const frame = stream.frames.at(-1)!;
      expect(frame).toEqual({
        id: String(frame.data.id),
        event: 'post.created',
        data: {
          id: Number(frame.id),
          type: 'post.created',
          createdAt: iso,
          resource: { type: 'post', id: post.id, path: `/posts/${post.id}` },
          data: post,
        },
      });
    }
    // Only new events: nothing from before it opened.
    expect(stream.frames.map((f) => f.event)).toEqual(['post.created', 'post.created', 'post.created']);
  });

  it('resumes after Last-Event-ID (which wins over after=) without loss or repeats', async () => {
    const first = await openStream(bBase, '/events/stream?after=0');
    await first.until(() => first.frames.length >= 3);
    const lastSeen = first.frames[2]!.id;
    first.close();
    const missed = [await createPost('while away 1'), await createPost('while away 2')];

    const resumed = await openStream(bBase, '/events/stream?after=0', { 'last-event-id': lastSeen });
    const later = await createPost('after resuming');
    await resumed.until(() => resumed.frames.some((f) => (f.data.data as { id: number }).id === later.id));
    const all = resumed.frames.map((f) => Number(f.id));
    // Every event after lastSeen, once each, in order: the rest of the backlog, the missed ones, the new one.
    const expected = (await t.app.inject({ method: 'GET', url: `/events?after=${lastSeen}&limit=100` }))
      .json()
      .data.map((e: { id: number }) => e.id);
    expect(all).toEqual(expected);
    const posts = resumed.frames
      .filter((f) => f.event === 'post.created')
      .map((f) => (f.data.data as { id: number }).id);
    expect(posts.slice(-3)).toEqual([...missed.map((p) => p.id), later.id]);
  });

  it('takes the filters: type= and post=', async () => {
    const post = await createPost('filtered');
    const byPost = await openStream(bBase, `/events/stream?post=${post.id}&after=0`);
    // Both start where the feed is as they open (byPost from its cursor): what is written next reaches them.
    const comments = await openStream(bBase, '/events/stream?type=comment.created');
    const comment = async (body: string) => {
      const res = await t.app.inject({
        method: 'POST',
        url: `/posts/${post.id}/comments`,
        headers: ann.auth,
        payload: { body },
      });
      expect(res.statusCode).toBe(201);
      return res.json().id as number;
    };
    const first = await comment('c');
    await createPost('not this one');
    // A later event both take: a stream sends in the feed's order, so the one between would have come before it.
    const last = await comment('after the one neither takes');
    await byPost.until(() => byPost.frames.length >= 3);
    await comments.until(() => comments.frames.length >= 2);
    expect(byPost.frames.map((f) => [f.event, (f.data.resource as { id: number }).id])).toEqual([
      ['post.created', post.id],
      ['comment.created', first],
      ['comment.created', last],
    ]);
    expect(comments.frames.map((f) => [f.event, (f.data.resource as { id: number }).id])).toEqual([
      ['comment.created', first],
      ['comment.created', last],
    ]);
  });

  it('Last-Event-ID: 0 and after=0 both start from the oldest event kept', async () => {
    await createPost('from the start');
    const byHeader = await openStream(bBase, '/events/stream', { 'last-event-id': '0' });
    const byQuery = await openStream(bBase, '/events/stream?after=0');
    expect(byHeader.res.statusCode).toBe(200);
    await byHeader.until(() => byHeader.frames.length > 0);
    await byQuery.until(() => byQuery.frames.length > 0);
    expect(byHeader.frames[0]!.id).toBe(byQuery.frames[0]!.id);
    const oldest = (await t.app.inject({ url: '/events?limit=1' })).json().data[0].id;
    expect(byHeader.frames[0]!.id).toBe(String(oldest));
    byHeader.close();
    byQuery.close();
  });

  it('a cursor beyond the newest event ever numbered (a reset database) is a 422 that says so', async () => {
    const newest = (await t.app.inject({ url: '/events?after=0&limit=100' })).json();
    expect(newest.hasMore).toBe(false);
    const problem = `is beyond the newest event (${newest.nextCursor}): the feed was reset, or this is not a cursor it gave`;
    const message = 'the cursor is ahead of the feed: resynchronise from the lists';
    expect422(
      await t.app.inject({ url: '/events/stream', headers: { 'last-event-id': '99999999' } }),
      {
        'Last-Event-Id': [problem],
      },
      message,
    );
    expect422(await t.app.inject({ url: '/events/stream?after=99999999' }), { after: [problem] }, message);
  });

  it('an unknown type is a 422, a cursor past retention a 410, both with the uniform body', async () => {
    expect422(await t.app.inject({ method: 'GET', url: '/events/stream?type=post.moved' }), {
      type: [expect.stringContaining('must be a comma-separated list of distinct event types')],
    });
    expect422(await t.app.inject({ method: 'GET', url: '/events/stream', headers: { 'last-event-id': 'abc' } }), {
      'Last-Event-Id': ['must be an event id'],
    });
    await t.app.db.query("UPDATE events SET created_at = now() - interval '8 days' WHERE id <= 2");
    const { eventsRepository } = await import('../../src/events/repository.js');
    await eventsRepository(t.app.db).purgeExpired(604_800, 100);
    expectError(
      await t.app.inject({ method: 'GET', url: '/events/stream', headers: { 'last-event-id': '1' } }),
      410,
      'gone',
      'events up to 2 have been purged (EVENT_RETENTION); event 1 is older: resynchronise from the lists',
    );
  });
});

describe('an instance', () => {
  it('past MAX_STREAMS answers 503 with Retry-After; a closed stream frees its place', async () => {
    const { app, base } = await instance({ MAX_STREAMS: '2' });
    try {
      const one = await openStream(base, '/events/stream');
      await openStream(base, '/events/stream');
      const refused = await app.inject({ method: 'GET', url: '/events/stream' });
      expectError(
        refused,
        503,
        'service_unavailable',
        'this instance serves its most event streams (2); retry shortly',
      );
      expect(refused.headers['retry-after']).toBe('5');
      one.close();
      await expect.poll(() => app.events.hub.size).toBe(1);
      const again = await openStream(base, '/events/stream');
      expect(again.res.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('sends a heartbeat comment on idle streams (every 15 s; 1 here), and ends its streams when it closes', async () => {
    const { app, base } = await instance({}, { eventStreamHeartbeatSeconds: 1 });
    const stream = await openStream(base, '/events/stream');
    await stream.until(() => stream.heartbeats >= 1);
    await app.close();
    await stream.until(() => stream.ended);
  });
});

describe('slow consumers, large events, bursts', () => {
  /** The status a new stream gets on `base` (the stream, if any, closed at once). */
  function statusOf(base: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(`${base}/events/stream`, { agent: false }, (res) => {
        resolve(res.statusCode!);
        res.destroy();
      });
      req.on('error', reject);
      req.end();
    });
  }

  /** A connection that asks for a stream and then reads nothing. */
  async function nonReader(base: string): Promise<Socket> {
    const socket = connect(Number(new URL(base).port), '127.0.0.1');
    await once(socket, 'connect');
    socket.write('GET /events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n');
    socket.pause();
    return socket;
  }

  async function bigPosts(count: number): Promise<number[]> {
    const { rows } = await t.app.db.query<{ id: string }>(
      `INSERT INTO posts (author_id, title, body) SELECT $1, 'big ' || g, 'b' FROM generate_series(1, $2::int) g RETURNING id`,
      [ann.user.id, count],
    );
    return rows.map((row) => Number(row.id));
  }

  it('every 20 KB event of one 200-row UPDATE reaches 3 reading streams and a catch-up, each on one connection', async () => {
    const { app, base } = await instance();
    try {
      const ids = await bigPosts(200);
      const newest = async () => {
        let cursor = 0;
        for (let more = true; more;) {
          const page = (await t.app.inject({ url: `/events?after=${cursor}&limit=100` })).json();
          cursor = page.nextCursor ?? cursor;
          more = page.hasMore;
        }
        return cursor;
      };
      const before = await newest();
      const readers = await Promise.all([1, 2, 3].map(() => openStream(base, '/events/stream?type=post.updated')));
      await sleep(300);
      await t.app.db.query(`UPDATE posts SET body = repeat('x', 20000) WHERE id = ANY($1::bigint[])`, [ids]);
      for (const reader of readers) {
        await reader.until(() => reader.frames.length >= 200 || reader.ended, 60_000);
        expect(reader.ended).toBe(false);
        expect(reader.frames.map((f) => Number(f.data.resource && (f.data.resource as { id: number }).id))).toEqual(
          ids,
        );
      }
      // Catching up over them from before: pages at the client's pace, on the same connection.
      const late = await openStream(base, `/events/stream?type=post.updated&after=${before}`);
      await late.until(() => late.frames.length >= 200 || late.ended, 60_000);
      expect(late.ended).toBe(false);
      expect(late.frames).toHaveLength(200);
      expect((late.frames[199]!.data.data as { body: string }).body).toHaveLength(20_000);
    } finally {
      await app.close();
    }
  }, 120_000);

  it('a client that reads nothing is cut once output waits unread for two heartbeats, and counts until then', async () => {
    const { app, base } = await instance({ MAX_STREAMS: '2' }, { eventStreamHeartbeatSeconds: 1 });
    const sockets: Socket[] = [];
    app.server.on('connection', (socket: Socket) => sockets.push(socket));
    try {
      const ids = await bigPosts(200);
      const stalled = await nonReader(base);
      const reader = await openStream(base, '/events/stream?type=post.updated');
      // Both count (the one that reads nothing once its request is in): a third is refused.
      await expect.poll(() => app.events.hub.size).toBe(2);
      expect(await statusOf(base)).toBe(503);
      const server = sockets.find((s) => s.remotePort === stalled.localPort)!;
      expect(server.destroyed).toBe(false);
      // 200 x 60 KB: more than the connection's buffers hold for a client that reads nothing.
      await t.app.db.query(`UPDATE posts SET body = repeat('y', 60000) WHERE id = ANY($1::bigint[])`, [ids]);
      await reader.until(() => reader.frames.length >= 200 || reader.ended, 60_000);
      expect(reader.ended).toBe(false);
      expect(reader.frames).toHaveLength(200);
      // Cut, and only then its place is free.
      const deadline = Date.now() + 30_000;
      while ((await statusOf(base)) === 503 && Date.now() < deadline) await sleep(200);
      expect(server.destroyed).toBe(true);
      expect(await statusOf(base)).toBe(200);
      stalled.destroy();
    } finally {
      await app.close();
    }
  }, 120_000);

  it('MAX_STREAMS holds under a burst: 60 at once against 20 open 20', async () => {
    const { app, base } = await instance({ MAX_STREAMS: '20' });
    const responses: IncomingMessage[] = [];
    try {
      const statuses = await Promise.all(
        Array.from(
          { length: 60 },
          () =>
            new Promise<number>((resolve, reject) => {
              const req = httpRequest(`${base}/events/stream`, { agent: false }, (res) => {
                responses.push(res);
                resolve(res.statusCode!);
              });
              req.on('error', reject);
              req.end();
            }),
        ),
      );
      expect(statuses.filter((s) => s === 200)).toHaveLength(20);
      expect(statuses.filter((s) => s === 503)).toHaveLength(40);
    } finally {
      for (const res of responses) res.destroy();
      await app.close();
    }
  });

  it("outlives the server's connection timeout: the heartbeat, not Fastify's 30 s, keeps it", async () => {
    const { app, base } = await instance({}, { eventStreamHeartbeatSeconds: 60 });
    // What connectionTimeout sets (30 s), shortened: an idle request's socket is cut after it. Not
    // shorter: it also bounds the route's own checks before the stream opens (300 ms was cut at load 12).
    app.server.timeout = 1_000;
    try {
      const stream = await openStream(base, '/events/stream');
      await sleep(2_500);
      expect(stream.ended).toBe(false);
      await createPost('still there');
      await stream.until(() => stream.frames.some((f) => (f.data.data as { title?: string }).title === 'still there'));
    } finally {
      await app.close();
    }
  });
});
