/**
 * Data is not kept longer than it serves: a replay after the created resource
 * was deleted does not hand its content back (and the record no longer holds
 * it); tombstones of deleted items live a day (shorter here), after which a
 * cursor naming the item is a 422; the scheduled purge removes both kinds of
 * expired rows, and events past EVENT_RETENTION with the finished webhook
 * deliveries of that age.
 */
import { onTopology } from '../helpers/database.js';
import { describe, expect, it, vi } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { testConfig, useTestApp } from '../helpers/factories.js';
import { expect422, expectError } from '../helpers/expect.js';

const t = useTestApp();
const ann = t.user();

const create = (url: string, key: string, payload: object) =>
  t.app.inject({ method: 'POST', url, headers: { ...ann.auth, 'idempotency-key': key }, payload });
const remove = (url: string) => t.app.inject({ method: 'DELETE', url, headers: ann.auth });
const bodyOf = async (key: string) =>
  (await t.app.db.query<{ body: string | null }>('SELECT body FROM idempotency_keys WHERE key = $1', [key])).rows[0]
    ?.body;
const count = async (sql: string) =>
  (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`)).rows[0]!.n;

describe('a replay after the created resource was deleted', () => {
  it('is a 409 that names what was created, without its content; nothing is created again', async () => {
    const first = await create('/posts', 'gone-1', { title: 'Secret title', body: 'secret body' });
    const id = first.json().id as number;
    expect(await bodyOf('gone-1')).toContain('Secret title');
    expect((await remove(`/posts/${id}`)).statusCode).toBe(204);
    expect(await bodyOf('gone-1')).toBeNull();

    const posts = await count('posts');
    const replay = await create('/posts', 'gone-1', { title: 'Secret title', body: 'secret body' });
    expectError(
      replay,
      409,
      'conflict',
      `post ${id}, created by the first request with this Idempotency-Key, has since been deleted`,
      {
        'Idempotency-Key': [`was used to create post ${id}, which has since been deleted`],
      },
    );
    expect(replay.body).not.toContain('secret');
    expect(await count('posts')).toBe(posts);
    // Another request with that key is still told so first.
    expect422(await create('/posts', 'gone-1', { title: 'Other', body: 'b' }), {
      'Idempotency-Key': ['was already used for a different request'],
    });
  });

  it('holds for comments, deleted one by one or with their post', async () => {
    const post = (await create('/posts', 'parent-1', { title: 'P', body: 'b' })).json();
    const url = `/posts/${post.id}/comments`;
    const one = (await create(url, 'comment-1', { body: 'first words' })).json();
    const two = (await create(url, 'comment-2', { body: 'second words' })).json();
    expect((await remove(`${url}/${one.id}`)).statusCode).toBe(204);
    expect(await bodyOf('comment-1')).toBeNull();
    expect(await bodyOf('comment-2')).toContain('second words');
    expect((await remove(`/posts/${post.id}`)).statusCode).toBe(204);
    expect(await bodyOf('comment-2')).toBeNull();
    const replay = await create(url, 'comment-2', { body: 'second words' });
    expectError(
      replay,
      409,
      'conflict',
      `comment ${two.id}, created by the first request with this Idempotency-Key, has since been deleted`,
      { 'Idempotency-Key': [`was used to create comment ${two.id}, which has since been deleted`] },
    );
  });
});

describe('tombstones and the scheduled purge', () => {
  /** An instance whose purge timer has fired once (only intervals are faked: the database calls run for real). */
  async function appAfterOnePurgeTick(env: Record<string, string> = {}, tombstoneRetentionSeconds = 86_400) {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const config = testConfig(env);
      const app = (await buildApp({
        ...config,
        ...onTopology(t.db.url),
        tombstoneRetentionSeconds,
      })) as unknown as FastifyInstance;
      await app.ready();
      vi.advanceTimersByTime(10 * 60_000);
      return app;
    } finally {
      vi.useRealTimers();
    }
  }

  async function untilGone(sql: string) {
    for (let i = 0; i < 100 && (await count(sql)) > 0; i++) await new Promise((r) => setTimeout(r, 20));
    return count(sql);
  }

  it('a cursor naming a deleted item works while its tombstone lives, then is a 422', async () => {
    const ids: number[] = [];
    for (const title of ['a', 'b', 'c'])
      ids.push((await create('/posts', `tomb-${title}`, { title, body: 'b' })).json().id);
    const [a, b, c] = ids as [number, number, number];
    expect((await remove(`/posts/${b}`)).statusCode).toBe(204);
    // Two spellings of the walk: the response cache may keep the first answer.
    const walk = (limit: number) =>
      t.app.inject({ url: `/posts?limit=${limit}&after=${b}&sort=title&author=${ann.user.id}` });
    expect((await walk(1)).json().data.map((p: { id: number }) => p.id)).toEqual([c]);

    await t.app.db.query("UPDATE deleted_posts SET deleted_at = now() - interval '24 hours 1 second' WHERE id = $1", [
      b,
    ]);
    await t.app.db.query("UPDATE deleted_posts SET deleted_at = now() - interval '23 hours' WHERE id <> $1", [b]);
    const app = await appAfterOnePurgeTick();
    try {
      expect(await untilGone(`deleted_posts WHERE id = ${b}`)).toBe(0);
    } finally {
      await app.close();
    }
    expect(await count('deleted_posts')).toBeGreaterThan(0);
    expect422(await walk(2), { after: ['does not name an item of this list'] });
    expect((await t.app.inject({ url: `/posts?limit=1&after=${a}` })).statusCode).toBe(200);
  });

  it('tombstoneRetentionSeconds sets the window; expired idempotency keys go in the same purge', async () => {
    const post = (await create('/posts', 'short-1', { title: 't', body: 'b' })).json();
    const comment = (await create(`/posts/${post.id}/comments`, 'short-2', { body: 'c' })).json();
    await remove(`/posts/${post.id}/comments/${comment.id}`);
    await t.app.db.query("UPDATE deleted_comments SET deleted_at = now() - interval '2 hours' WHERE id = $1", [
      comment.id,
    ]);
    await t.app.db.query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'short-1'");

    const app = await appAfterOnePurgeTick({}, 3600);
    try {
      expect(await untilGone(`deleted_comments WHERE id = ${comment.id}`)).toBe(0);
      expect(await untilGone("idempotency_keys WHERE key = 'short-1'")).toBe(0);
    } finally {
      await app.close();
    }
    expect(await count("idempotency_keys WHERE key = 'short-2'")).toBe(1);
  });

  it('EVENT_RETENTION: expired events go in the same purge, oldest first, the newest always kept', async () => {
    await t.app.inject({ url: '/events' });
    const { rows } = await t.app.db.query<{ first: number; last: number }>(
      'SELECT min(id)::int AS first, max(id)::int AS last FROM events',
    );
    const { first, last } = rows[0]!;
    await t.app.db.query("UPDATE events SET created_at = now() - interval '2 hours' WHERE id < $1", [first + 2]);
    await t.app.db.query("UPDATE events SET created_at = now() - interval '2 hours' WHERE id = $1", [last]);

    const app = await appAfterOnePurgeTick({ EVENT_RETENTION: '3600' });
    try {
      expect(await untilGone(`events WHERE id < ${first + 2}`)).toBe(0);
    } finally {
      await app.close();
    }
    expect(await count(`events WHERE id IN (${first + 2}, ${last})`)).toBe(2);
    expect((await t.app.inject({ url: `/events?after=${first}` })).statusCode).toBe(410);
  });

  it('finished webhook deliveries go EVENT_RETENTION after their last attempt; those still to send stay', async () => {
    const hook = await t.app.inject({
      method: 'POST',
      url: '/webhooks',
      headers: ann.auth,
      payload: { url: 'https://hooks.example.com/r' },
    });
    const { rows } = await t.app.db.query<{ id: number; status: string }>(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, status, next_attempt_at, updated_at)
       VALUES ($1, 1, 'delivered', NULL, now() - interval '2 hours'), ($1, 2, 'given_up', NULL, now() - interval '2 hours'),
              ($1, 3, 'failed', now() + interval '1 hour', now() - interval '2 hours'), ($1, 4, 'delivered', NULL, now())
       RETURNING id, status`,
      [hook.json().id],
    );
    const app = await appAfterOnePurgeTick({ EVENT_RETENTION: '3600', WEBHOOK_CONCURRENCY: '0' });
    try {
      expect(await untilGone(`webhook_deliveries WHERE id IN (${rows[0]!.id}, ${rows[1]!.id})`)).toBe(0);
    } finally {
      await app.close();
    }
    expect(await count(`webhook_deliveries WHERE id IN (${rows[2]!.id}, ${rows[3]!.id})`)).toBe(2);
  });
});
