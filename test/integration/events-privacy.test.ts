/**
 * Deleted means gone from the feed too (docs/api.md §12): once a post, comment
 * or user is deleted, its earlier events keep their ids and types but no
 * content, on the feed and in later webhook deliveries; a change to private
 * fields only (e-mail, password) makes no event.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { createComment, createPost, signUp, startInstance, type SignedUp } from '../helpers/factories.js';
import { startReceiver } from '../helpers/receivers.js';

interface Event {
  id: number;
  type: string;
  resource: { type: string; id: number };
  data: Record<string, unknown>;
}

let db: TestDatabase;
let app: FastifyInstance;
let ann: SignedUp;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startInstance(db, {
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE: 'true',
    WEBHOOK_POLL_MS: '25',
    // The first retry is due minutes after a failure: the post is deleted before it, however slow the machine
    // (1–2 s, which a loaded machine could spend before the delete), and the test then makes it due.
    WEBHOOK_RETRY_BASE_MS: '600000',
  });
  ann = await signUp(app, { name: 'Ann' });
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

/** Every event after `after` once the feed has numbered `count` of them. */
async function feed(after: number, count: number, query = ''): Promise<Event[]> {
  let events: Event[] = [];
  await expect
    .poll(async () => {
      const res = await app.inject({ url: `/events?after=${after}&limit=100${query}` });
      expect(res.statusCode).toBe(200);
      events = res.json<{ data: Event[] }>().data;
      return events.length;
    })
    .toBeGreaterThanOrEqual(count);
  return events;
}
const head = async () => (await feed(0, 1)).at(-1)!.id;

describe('after a delete, the feed shows ids and types only', () => {
  it('a post: its own events and its comments’, whoever deleted it', async () => {
    const post = await createPost(app, ann, { title: 'Secret title', body: 'Secret body' });
    const patched = await app.inject({
      method: 'PATCH',
      url: `/posts/${post.id}`,
      headers: ann.auth,
      payload: { title: 'Still secret' },
    });
    expect(patched.statusCode).toBe(200);
    const comment = await createComment(app, ann, post.id, 'Secret comment');
    expect((await feed(0, 1, `&post=${post.id}`)).some((e) => JSON.stringify(e.data).includes('Secret'))).toBe(true);

    const deleted = await app.inject({ method: 'DELETE', url: `/posts/${post.id}`, headers: ann.auth });
    expect(deleted.statusCode).toBe(204);
    const events = await feed(0, 5, `&post=${post.id}`);
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ['post.created', { id: post.id }],
      ['post.updated', { id: post.id }],
      ['comment.created', { id: comment.id, postId: post.id }],
      ['post.deleted', { id: post.id }],
      ['comment.deleted', { id: comment.id, postId: post.id }],
    ]);
  });

  it('a comment deleted alone; the post’s events keep their content', async () => {
    const post = await createPost(app, ann, { title: 'Public title' });
    const comment = await createComment(app, ann, post.id, 'Secret comment');
    const deleted = await app.inject({
      method: 'DELETE',
      url: `/posts/${post.id}/comments/${comment.id}`,
      headers: ann.auth,
    });
    expect(deleted.statusCode).toBe(204);
    const events = await feed(0, 3, `&post=${post.id}`);
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ['post.created', expect.objectContaining({ id: post.id, title: 'Public title' })],
      ['comment.created', { id: comment.id, postId: post.id }],
      ['comment.deleted', { id: comment.id, postId: post.id }],
    ]);
  });

  it('a user deleted (by SQL: the API deletes none): the name is gone', async () => {
    const start = await head();
    const gone = await signUp(app, { name: 'Vanishing Name' });
    await app.db.query('DELETE FROM users WHERE id = $1', [gone.user.id]);
    const events = (await feed(start, 2)).filter((e) => e.resource.type === 'user' && e.resource.id === gone.user.id);
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ['user.created', { id: gone.user.id }],
      ['user.deleted', { id: gone.user.id }],
    ]);
  });
});

describe('private fields', () => {
  it('an e-mail or password change makes no event; a name change does', async () => {
    const bob = await signUp(app, { name: 'Bob' });
    const start = await head();
    const patch = (payload: object) =>
      app.inject({ method: 'PATCH', url: `/users/${bob.user.id}`, headers: bob.auth, payload });
    expect((await patch({ email: `bob-new-${bob.user.id}@example.com` })).statusCode).toBe(200);
    expect((await patch({ password: 'another-long-password' })).statusCode).toBe(200);
    expect((await patch({ name: 'Robert' })).statusCode).toBe(200);
    const events = await feed(start, 1);
    expect(events.map((e) => [e.type, e.data.name])).toEqual([['user.updated', 'Robert']]);
  });
});

describe('webhooks', () => {
  it('a delivery retried after the delete carries no deleted content', async () => {
    const r = await startReceiver((_req, n) => (n === 0 ? 500 : 204));
    try {
      const hook = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: ann.auth,
        payload: { url: r.url, types: ['post.created'] },
      });
      expect(hook.statusCode).toBe(201);
      const post = await createPost(app, ann, { title: 'Secret title', body: 'Secret body' });
      const [first] = await r.waitFor(1);
      expect(JSON.parse(first!.body).data).toMatchObject({ title: 'Secret title' });
      const deleted = await app.inject({ method: 'DELETE', url: `/posts/${post.id}`, headers: ann.auth });
      expect(deleted.statusCode).toBe(204);
      // Once the failure is recorded (its retry scheduled), the retry's time comes.
      await expect
        .poll(async () => {
          const list = await app.inject({ url: `/webhooks/${hook.json().id}/deliveries`, headers: ann.auth });
          return list.json().data[0]?.status;
        })
        .toBe('failed');
      await app.db.query('UPDATE webhook_deliveries SET next_attempt_at = now() WHERE webhook_id = $1', [
        hook.json().id,
      ]);
      const [, retried] = await r.waitFor(2);
      expect(JSON.parse(retried!.body)).toMatchObject({ type: 'post.created', data: { id: post.id } });
      expect(retried!.body).not.toContain('Secret');
    } finally {
      await r.close();
    }
  });
});
