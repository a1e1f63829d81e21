/**
 * Idempotency-Key on POST /posts, POST /posts/{postId}/comments and POST /users
 * (docs/api.md §8): a retry replays the first response and creates
 * nothing; another body is a 422; a key in flight is a 409; a failed create
 * stores nothing; keys expire after 24 h and are scoped per user.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { signUp, useTestApp, type SignedUp } from '../helpers/factories.js';
import { expectError, expect422, expect404, type Response } from '../helpers/expect.js';
import { idempotencyKeysRepository, idempotencyLockId } from '../../src/repositories/idempotency-keys.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });

const post = (url: string, who: SignedUp | null, key: string | undefined, payload: object) =>
  t.app.inject({
    method: 'POST',
    url,
    headers: { ...who?.auth, ...(key !== undefined && { 'idempotency-key': key }) },
    payload,
  });

const count = async (sql: string, params: unknown[] = []) =>
  (await t.app.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, params)).rows[0]!.n;
const postsBy = (who: SignedUp) => count('posts WHERE author_id = $1', [who.user.id]);
const storedKeys = (key: string) => count('idempotency_keys WHERE key = $1', [key]);

/** The same response again: status, the headers that belong to it, the exact body bytes. */
function expectReplay(first: Response, replay: Response) {
  expect(replay.statusCode).toBe(first.statusCode);
  expect(replay.body).toBe(first.body);
  for (const header of ['location', 'etag', 'content-type']) expect(replay.headers[header]).toBe(first.headers[header]);
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(first.headers['idempotent-replayed']).toBeUndefined();
}

describe('POST /posts with Idempotency-Key', () => {
  it('a retry with the same key and body replays the first response and creates nothing', async () => {
    const before = await postsBy(ann);
    const first = await post('/posts', ann, 'post-key-1', { title: 'Once', body: 'only once' });
    expect(first.statusCode).toBe(201);
    expect(first.headers.location).toBe(`/posts/${first.json().id}`);
    expect(first.headers.etag).toBe(`"p${first.json().id}-1-0"`);
    expect(first.headers['content-type']).toBe('application/json; charset=utf-8');

    const replay = await post('/posts', ann, 'post-key-1', { title: 'Once', body: 'only once' });
    expectReplay(first, replay);
    // The same members in another order are the same request.
    expectReplay(first, await post('/posts', ann, 'post-key-1', { body: 'only once', title: 'Once' }));
    expect(await postsBy(ann)).toBe(before + 1);
    expect(await storedKeys('post-key-1')).toBe(1);
  });

  it('the replay is the first response even after the post has changed', async () => {
    const first = await post('/posts', ann, 'post-key-2', { title: 'Original', body: 'b' });
    await t.app.inject({
      method: 'PATCH',
      url: first.headers.location as string,
      headers: ann.auth,
      payload: { title: 'Changed' },
    });
    const replay = await post('/posts', ann, 'post-key-2', { title: 'Original', body: 'b' });
    expectReplay(first, replay);
    expect(replay.json().title).toBe('Original');
  });

  it('the same key with another body is a 422 on Idempotency-Key, and creates nothing', async () => {
    await post('/posts', ann, 'post-key-3', { title: 'A', body: 'b' });
    const before = await postsBy(ann);
    expect422(await post('/posts', ann, 'post-key-3', { title: 'B', body: 'b' }), {
      'Idempotency-Key': ['was already used for a different request'],
    });
    // Another route is another request too.
    expect422(await post(`/posts/${(await firstPostOf(ann)).id}/comments`, ann, 'post-key-3', { body: 'b' }), {
      'Idempotency-Key': ['was already used for a different request'],
    });
    expect(await postsBy(ann)).toBe(before);
  });

  it('the same key while the first request is still running is a 409', async () => {
    // Hold the key's lock the way an unfinished first request does.
    const holder = new pg.Client({ connectionString: t.db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      const lockId = idempotencyLockId(`user:${ann.user.id}`, 'post-key-4');
      await holder.query('SELECT pg_advisory_xact_lock($1::bigint)', [lockId]);
      const before = await postsBy(ann);
      expectError(
        await post('/posts', ann, 'post-key-4', { title: 'Busy', body: 'b' }),
        409,
        'conflict',
        'a request with this Idempotency-Key is still being processed; retry later',
        { 'Idempotency-Key': ['is in use by a request still being processed'] },
      );
      expect(await postsBy(ann)).toBe(before);
      // Other keys, and the same key of another user, are not held up.
      expect((await post('/posts', ann, 'post-key-4b', { title: 'Free', body: 'b' })).statusCode).toBe(201);
      expect((await post('/posts', bob, 'post-key-4', { title: 'Free', body: 'b' })).statusCode).toBe(201);
      await holder.query('ROLLBACK');
    } finally {
      await holder.end();
    }
    // Once the first request is over, the key is usable.
    expect((await post('/posts', ann, 'post-key-4', { title: 'Busy', body: 'b' })).statusCode).toBe(201);
  });

  it('an expired key (older than 24 h) is processed anew and its record replaced', async () => {
    const first = await post('/posts', ann, 'post-key-5', { title: 'Old', body: 'b' });
    await t.app.db.query(
      "UPDATE idempotency_keys SET created_at = now() - interval '24 hours 1 second' WHERE key = 'post-key-5'",
    );
    const before = await postsBy(ann);
    const again = await post('/posts', ann, 'post-key-5', { title: 'Old', body: 'b' });
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(again.json().id).not.toBe(first.json().id);
    expect(await postsBy(ann)).toBe(before + 1);
    expectReplay(again, await post('/posts', ann, 'post-key-5', { title: 'Old', body: 'b' }));
    expect(await storedKeys('post-key-5')).toBe(1);
  });

  it('keys are per user: the same key from two users creates two posts', async () => {
    const a = await post('/posts', ann, 'shared-key', { title: 'Same', body: 'b' });
    const b = await post('/posts', bob, 'shared-key', { title: 'Same', body: 'b' });
    expect([a.statusCode, b.statusCode]).toEqual([201, 201]);
    expect(a.json().authorId).toBe(ann.user.id);
    expect(b.json().authorId).toBe(bob.user.id);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    expect(await storedKeys('shared-key')).toBe(2);
  });

  it('an invalid key is a 422 on Idempotency-Key', async () => {
    const before = await postsBy(ann);
    const cases: [string, string][] = [
      ['', 'must not be empty'],
      ['k'.repeat(256), 'must be at most 255 characters'],
      ['caf\u00e9', 'must be printable ASCII characters'],
      ['tab\there', 'must be printable ASCII characters'],
    ];
    for (const [key, message] of cases) {
      expect422(await post('/posts', ann, key, { title: 'T', body: 'b' }), { 'Idempotency-Key': [message] });
    }
    expect(await postsBy(ann)).toBe(before);
    // 255 printable characters, spaces and symbols included, are fine.
    const longest = `${'k'.repeat(250)} !~"x`;
    expect((await post('/posts', ann, longest, { title: 'T', body: 'b' })).statusCode).toBe(201);
  });

  it('without a key every POST creates, and nothing is stored', async () => {
    const before = await postsBy(ann);
    const keys = await count('idempotency_keys');
    await post('/posts', ann, undefined, { title: 'No key', body: 'b' });
    await post('/posts', ann, undefined, { title: 'No key', body: 'b' });
    expect(await postsBy(ann)).toBe(before + 2);
    expect(await count('idempotency_keys')).toBe(keys);
  });

  it('an invalid body is a 422 and stores nothing', async () => {
    expect422(await post('/posts', ann, 'post-key-7', { title: ' ' }), {
      title: ['must not be blank'],
      body: ['is required'],
    });
    expect(await storedKeys('post-key-7')).toBe(0);
  });
});

async function firstPostOf(who: SignedUp): Promise<{ id: number }> {
  const res = await t.app.inject({ method: 'GET', url: `/posts?author=${who.user.id}&limit=1` });
  return res.json().data[0];
}

describe('POST /posts/{postId}/comments with Idempotency-Key', () => {
  it('replays the first comment; commentCount counts one', async () => {
    const { id: postId } = (await post('/posts', ann, undefined, { title: 'Commented', body: 'b' })).json();
    const url = `/posts/${postId}/comments`;
    const first = await post(url, bob, 'comment-key-1', { body: 'only once' });
    expect(first.statusCode).toBe(201);
    expect(first.headers.location).toBe(`${url}/${first.json().id}`);
    expect(first.headers.etag).toBe(`"c${first.json().id}-1"`);
    expectReplay(first, await post(url, bob, 'comment-key-1', { body: 'only once' }));
    expect(await count('comments WHERE post_id = $1', [postId])).toBe(1);
    const read = await t.app.inject({ method: 'GET', url: `/posts/${postId}` });
    expect(read.json().commentCount).toBe(1);
    // Path parameters are part of the request: the same body under another post is another request.
    const { id: otherPost } = (await post('/posts', ann, undefined, { title: 'Other', body: 'b' })).json();
    expect422(await post(`/posts/${otherPost}/comments`, bob, 'comment-key-1', { body: 'only once' }), {
      'Idempotency-Key': ['was already used for a different request'],
    });
  });

  it('a failed create (404) stores nothing', async () => {
    expect404(await post('/posts/999999/comments', bob, 'comment-key-2', { body: 'x' }), 'post 999999 does not exist');
    expect(await storedKeys('comment-key-2')).toBe(0);
  });
});

describe('POST /users with Idempotency-Key', () => {
  const eve = { name: 'Eve', email: 'eve@example.com', password: 'password-eve' };

  it('a retried sign-up replays the first response and creates one user', async () => {
    const first = await post('/users', null, 'signup-key-1', eve);
    expect(first.statusCode).toBe(201);
    expect(first.json()).toMatchObject({ name: 'Eve', email: 'eve@example.com', role: 'user' });
    expectReplay(first, await post('/users', null, 'signup-key-1', eve));
    expect(await count('users WHERE email = $1', [eve.email])).toBe(1);
    // Sign-ups without a token share the anonymous scope.
    const { rows } = await t.app.db.query('SELECT scope FROM idempotency_keys WHERE key = $1', ['signup-key-1']);
    expect(rows).toEqual([{ scope: 'anonymous' }]);
  });

  it('another password with the same key is another request (422)', async () => {
    expect422(await post('/users', null, 'signup-key-1', { ...eve, password: 'another-password' }), {
      'Idempotency-Key': ['was already used for a different request'],
    });
  });

  it('the stored request hash is not a plain SHA-256 of the request, so it does not expose the password', async () => {
    const { rows } = await t.app.db.query<{ body: string; hash: Buffer }>(
      'SELECT body, request_hash AS hash FROM idempotency_keys WHERE key = $1',
      ['signup-key-1'],
    );
    expect(rows[0]!.body).not.toContain(eve.password);
    const plain = createHash('sha256')
      .update(JSON.stringify(['POST', '/users', {}, { email: eve.email, name: eve.name, password: eve.password }]))
      .digest();
    expect(rows[0]!.hash.equals(plain)).toBe(false);
  });

  it('a failed sign-up (409, e-mail taken) stores nothing; the retry is processed anew', async () => {
    const frank = await signUp(t.app, { name: 'Frank', email: 'frank@example.com' });
    const body = { name: 'Frank 2', email: 'frank@example.com', password: 'password-frank2' };
    const taken = await post('/users', null, 'signup-key-2', body);
    expectError(taken, 409, 'conflict', 'email is already registered', { email: ['is already registered'] });
    expect(await storedKeys('signup-key-2')).toBe(0);
    // The address becomes free; the same request with the same key now succeeds.
    await t.app.inject({
      method: 'PATCH',
      url: `/users/${frank.user.id}`,
      headers: frank.auth,
      payload: { email: 'frank-old@example.com' },
    });
    const retry = await post('/users', null, 'signup-key-2', body);
    expect(retry.statusCode).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
  });
});

describe('expired keys are purged', () => {
  it('purgeExpired deletes rows older than 24 h in batches and keeps younger ones', async () => {
    for (const key of ['purge-1', 'purge-2', 'purge-3', 'purge-keep']) {
      await post('/posts', ann, key, { title: key, body: 'b' });
    }
    await t.app.db.query(
      "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key IN ('purge-1', 'purge-2', 'purge-3')",
    );
    const keys = idempotencyKeysRepository(t.app.db);
    expect(await keys.purgeExpired(2)).toBe(2);
    expect(await keys.purgeExpired(2)).toBe(1);
    expect(await keys.purgeExpired(2)).toBe(0);
    expect(await count("idempotency_keys WHERE key LIKE 'purge-%'")).toBe(1);
    expect(await storedKeys('purge-keep')).toBe(1);
  });
});
