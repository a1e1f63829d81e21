/**
 * A post row-locked by another session (src/db/batch.ts): only the writes to
 * that post wait for it. Changes and comments of other posts, new posts and
 * uncached reads answer while it is held, no request runs out of pool connections, and
 * every counter comes out exact.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, it, vi } from 'vitest';
import type { FastifyInstance, InjectOptions } from 'fastify';
import pg from 'pg';
import { buildApp } from '../../src/app.js';
import { createTestDatabase, onTopology } from '../helpers/database.js';
import { createPost, signUp, testConfig, useTestApp } from '../helpers/factories.js';
import { iso, type Response } from '../helpers/expect.js';

// Reads go to the database, not to cached answers.
const t = useTestApp();
const ann = t.user({ name: 'Ann' });

/** How long the load runs while the other session holds the lock. */
const LOAD_MS = 1500;
/** When the lock goes regardless: the load has not finished by then only if a request of it waits for the lock. */
const HOLD_LIMIT_MS = 30_000;

interface Sent {
  kind: string;
  res: Response;
}

it('holds back only the writes to that post', async () => {
  const create = async (title: string) =>
    (
      await t.app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title, body: 'b' } })
    ).json() as { id: number };
  const others: number[] = [];
  for (let i = 0; i < 20; i++) others.push((await create(`Other ${i}`)).id);
  // The highest id: a shared UPDATE that reaches it has written every other post of its batch.
  const locked = (await create('Locked')).id;
  const totalBefore = (await t.app.inject({ url: '/posts' })).json().total as number;

  const patches = new Map<number, number>(others.map((id) => [id, 0]));
  const comments = new Map<number, number>(others.map((id) => [id, 0]));
  const sent: Sent[] = [];
  const send = async (kind: string, options: InjectOptions) => {
    const res = await t.app.inject(options);
    sent.push({ kind, res });
    return res;
  };
  let serial = 0;
  const patch = async (id: number) => {
    const res = await send('patch', {
      method: 'PATCH',
      url: `/posts/${id}`,
      headers: ann.auth,
      payload: { title: `Title ${(serial += 1)}` },
    });
    if (res.statusCode === 200) patches.set(id, patches.get(id)! + 1);
  };
  const comment = async (id: number) => {
    const res = await send('comment', {
      method: 'POST',
      url: `/posts/${id}/comments`,
      headers: ann.auth,
      payload: { body: 'c' },
    });
    if (res.statusCode === 201) comments.set(id, comments.get(id)! + 1);
  };
  const created: number[] = [];
  const newPost = async () => {
    const res = await send('create', {
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: 'New', body: 'b' },
    });
    if (res.statusCode === 201) created.push(res.json().id as number);
  };
  const read = (id: number) => send('read', { url: `/posts/${id}` });

  const locker = new pg.Client({ connectionString: t.db.url });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [locked]);
    const lockedAt = performance.now();

    // A burst that shares statements with the change of the locked post, then a steady load beside it.
    const burst = others.map(patch);
    const answered = (options: InjectOptions) =>
      t.app.inject(options).then((res) => ({ res, answeredAt: performance.now() }));
    const waiting = answered({
      method: 'PATCH',
      url: `/posts/${locked}`,
      headers: ann.auth,
      payload: { title: 'After the lock' },
    });
    const waitingComment = answered({
      method: 'POST',
      url: `/posts/${locked}/comments`,
      headers: ann.auth,
      payload: { body: 'After the lock' },
    });
    let step = 0;
    const workers = Array.from({ length: 8 }, async () => {
      while (performance.now() - lockedAt < LOAD_MS) {
        const id = others[(step += 1) % others.length]!;
        await [patch, comment, newPost, read][step % 4]!(id);
      }
    });
    // The load finishes while the lock is held, however slow the machine: none of it waited for the lock.
    const load = Promise.all([...burst, ...workers]);
    const heldBack = await Promise.race([load.then(() => false), sleep(HOLD_LIMIT_MS).then(() => true)]);
    const releasedAt = performance.now();
    await locker.query('COMMIT');
    await load;
    expect(heldBack).toBe(false);
    const { res, answeredAt } = await waiting;
    const { res: commented, answeredAt: commentedAt } = await waitingComment;

    for (const kind of ['patch', 'comment', 'create', 'read'])
      expect(sent.filter((s) => s.kind === kind).length).toBeGreaterThan(0);
    const failed = sent.filter((s) => ![200, 201].includes(s.res.statusCode));
    expect(failed.map((s) => `${s.kind} ${s.res.statusCode}`)).toEqual([]);

    // The locked post's change and comment waited for the lock, and no longer (in either order).
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      id: locked,
      title: 'After the lock',
      body: 'b',
      authorId: ann.user.id,
      commentCount: expect.toBeOneOf([0, 1]),
      createdAt: iso,
      updatedAt: iso,
    });
    expect(commented.statusCode).toBe(201);
    expect(commented.json()).toEqual({
      id: expect.any(Number),
      postId: locked,
      authorId: ann.user.id,
      body: 'After the lock',
      createdAt: iso,
      updatedAt: iso,
    });
    for (const at of [answeredAt, commentedAt]) expect(at).toBeGreaterThanOrEqual(releasedAt);
  } finally {
    await locker.end();
  }

  // Every write acknowledged is there, once: versions, comment counts and totals exact.
  for (const id of others) {
    const res = await t.app.inject({ url: `/posts/${id}` });
    expect(res.json().commentCount).toBe(comments.get(id));
    expect(res.headers.etag).toBe(`"p${id}-${1 + patches.get(id)!}-${comments.get(id)}"`);
    expect((await t.app.inject({ url: `/posts/${id}/comments` })).json().total).toBe(comments.get(id));
  }
  expect((await t.app.inject({ url: `/posts/${locked}` })).headers.etag).toBe(`"p${locked}-2-1"`);
  expect(new Set(created).size).toBe(created.length);
  expect((await t.app.inject({ url: '/posts' })).json().total).toBe(totalBefore + created.length);
}, 60_000);

it('a shared statement past the statement timeout answers its writers once, within one timeout, and keeps nothing', async () => {
  const TIMEOUT_MS = 1000;
  // On the server itself: through a pooler in transaction mode the session's statement timeout does not hold.
  const db = await createTestDatabase();
  const url = onTopology(db.url).databaseListenUrl ?? db.url;
  const config = testConfig({
    PG_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS),
  });
  const app = (await buildApp({ ...config, databaseUrl: url })) as unknown as FastifyInstance;
  const timed = { app, db: { ...db, url }, close: async () => (await app.close(), await db.drop()) };
  try {
    const bob = await signUp(timed.app, { name: 'Bob' });
    const post = await createPost(timed.app, bob);
    // Every comment insert waits for this table lock, whichever post it is on.
    const locker = new pg.Client({ connectionString: timed.db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE comments IN SHARE ROW EXCLUSIVE MODE');
      // Files share their worker's modules (vitest.config.ts): the spy is gone before anything can fail.
      const sent: (string | undefined)[] = [];
      const inserts = vi.spyOn(pg.Client.prototype, 'query');
      // The first goes out alone; the rest queue and share the next statement.
      const answers = await Promise.all(
        Array.from({ length: 6 }, async () => {
          const res = await timed.app.inject({
            method: 'POST',
            url: `/posts/${post.id}/comments`,
            headers: bob.auth,
            payload: { body: 'c' },
          });
          return { status: res.statusCode, message: res.json().message as string };
        }),
      ).finally(() => {
        sent.push(...inserts.mock.calls.map(([q]) => (typeof q === 'string' ? q : (q as { text?: string }).text)));
        inserts.mockRestore();
      });
      for (const answer of answers) {
        expect(answer.status).toBe(503);
        expect(answer.message).toBe('the database did not answer in time; try again shortly');
      }
      // Before the fix each write of the refused statement ran again alone and waited a second timeout.
      expect(sent.filter((text) => text?.includes('INSERT INTO comments'))).toHaveLength(2);
    } finally {
      await locker.end();
    }
    expect((await timed.app.inject({ url: `/posts/${post.id}/comments` })).json().total).toBe(0);
  } finally {
    await timed.close();
  }
});
