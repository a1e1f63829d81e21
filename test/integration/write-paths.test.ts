/**
 * Which path a change takes through changeOwned (src/use-cases/change-owned.ts): a
 * real change of a post without If-Match is one statement, no transaction (a
 * measured speed-up); with If-Match, an empty change, or on a comment or a
 * user, the lock → 404/403 → 412 → write sequence runs in a transaction. Both
 * paths answer alike: 200 with the new ETag, 403, 404.
 */
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { createPost, useTestApp, type SignedUp } from '../helpers/factories.js';
import { expect404, expectError, iso } from '../helpers/expect.js';

// A pass-through spy on the transaction helper: the real transaction runs, the calls are counted.
vi.mock('../../src/db/pool.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/db/pool.js')>();
  return { ...real, withTransaction: vi.fn(real.withTransaction) };
});
const pool = await import('../../src/db/pool.js');
const transactions = vi.mocked(pool.withTransaction);

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });
beforeEach(() => {
  transactions.mockClear();
});

const firstPost = () => createPost(t.app, ann, { title: 'First' });

const change = (
  method: 'PATCH' | 'PUT',
  id: number,
  who: SignedUp,
  payload: object,
  headers: Record<string, string> = {},
) => t.app.inject({ method, url: `/posts/${id}`, headers: { ...who.auth, ...headers }, payload });

describe('a post changed without If-Match', () => {
  it.each(['PATCH', 'PUT'] as const)('%s: one statement, no transaction, the new post and ETag', async (method) => {
    const { id } = await firstPost();
    const res = await change(method, id, ann, { title: 'Second', body: 'more' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      id,
      title: 'Second',
      body: 'more',
      authorId: ann.user.id,
      commentCount: 0,
      createdAt: iso,
      updatedAt: iso,
    });
    expect(res.headers.etag).toBe(`"p${id}-2-0"`);
    expect(transactions).not.toHaveBeenCalled();
  });

  it("another user's post: 403 from the read after the statement wrote nothing", async () => {
    const { id } = await firstPost();
    expectError(
      await change('PATCH', id, bob, { title: 'Mine' }),
      403,
      'forbidden',
      'only its author or an admin may change this post',
    );
    expect(transactions).not.toHaveBeenCalled();
    expect((await t.app.inject({ url: `/posts/${id}` })).json().title).toBe('First');
  });

  it('a missing post: 404', async () => {
    expect404(await change('PATCH', 999_999, ann, { title: 'Ghost' }), 'post 999999 does not exist');
    expect(transactions).not.toHaveBeenCalled();
  });

  it('a change to the values already stored: the post as it is, version unchanged', async () => {
    const { id } = await firstPost();
    const res = await change('PUT', id, ann, { title: 'First', body: 'text' });
    expect(res.statusCode).toBe(200);
    expect(res.headers.etag).toBe(`"p${id}-1-0"`);
    expect(transactions).not.toHaveBeenCalled();
  });
});

describe('the locked sequence', () => {
  it('a post with If-Match: one transaction, and a stale ETag is a 412', async () => {
    const { id } = await firstPost();
    const ok = await change('PATCH', id, ann, { title: 'Second' }, { 'if-match': `"p${id}-1-0"` });
    expect(ok.statusCode).toBe(200);
    expect(ok.headers.etag).toBe(`"p${id}-2-0"`);
    expect(transactions).toHaveBeenCalledTimes(1);
    const stale = await change('PATCH', id, ann, { title: 'Third' }, { 'if-match': `"p${id}-1-0"` });
    expectError(stale, 412, 'precondition_failed', 'If-Match does not match the current ETag');
  });

  it('an empty PATCH of a post: a transaction, no write', async () => {
    const { id } = await firstPost();
    const res = await change('PATCH', id, ann, {});
    expect(res.statusCode).toBe(200);
    expect(res.headers.etag).toBe(`"p${id}-1-0"`);
    expect(transactions).toHaveBeenCalledTimes(1);
  });

  it('deleting a post, and changing a comment: a transaction each', async () => {
    const { id } = await firstPost();
    const created = await t.app.inject({
      method: 'POST',
      url: `/posts/${id}/comments`,
      headers: bob.auth,
      payload: { body: 'hi' },
    });
    const commentId = (created.json() as { id: number }).id;
    transactions.mockClear();
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/posts/${id}/comments/${commentId}`,
      headers: bob.auth,
      payload: { body: 'hello' },
    });
    expect(patched.statusCode).toBe(200);
    expect(transactions).toHaveBeenCalledTimes(1);
    const deleted = await t.app.inject({ method: 'DELETE', url: `/posts/${id}`, headers: ann.auth });
    expect(deleted.statusCode).toBe(204);
    expect(transactions).toHaveBeenCalledTimes(2);
  });
});
