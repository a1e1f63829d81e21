/**
 * Conditional requests (docs/api.md §8): ETags on every single-resource
 * response and when they change, If-None-Match → 304 on GET and HEAD,
 * If-Match → 412 on PATCH, PUT and DELETE, checked under the write's row lock
 * so that of several clients racing with one ETag exactly one wins.
 */
import { describe, expect, it } from 'vitest';
import { createComment, createPost, signUp, useTestApp, type SignedUp } from '../helpers/factories.js';
import { expectError, expect404, type Response } from '../helpers/expect.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });
const admin = t.admin({ name: 'Root' });

type Method = 'GET' | 'HEAD' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
const send = (
  method: Method,
  url: string,
  who: SignedUp | null,
  headers: Record<string, string> = {},
  payload?: object,
) => t.app.inject({ method, url, headers: { ...who?.auth, ...headers }, ...(payload && { payload }) });

const etagOf = async (url: string, who: SignedUp | null = null) => (await send('GET', url, who)).headers.etag as string;

const expect412 = (res: Response) =>
  expectError(res, 412, 'precondition_failed', 'If-Match does not match the current ETag');

/** A 304: no body, but the ETag and the request id. */
function expect304(res: Response, etag: string) {
  expect(res.statusCode).toBe(304);
  expect(res.body).toBe('');
  expect(res.headers.etag).toBe(etag);
  expect(res.headers['x-request-id']).toEqual(expect.any(String));
  expect(res.headers['content-type']).toBeUndefined();
}

describe('ETag on single resources', () => {
  it('a post: on POST, GET, PATCH and PUT; it changes with every change, a comment included', async () => {
    const created = await send('POST', '/posts', ann, {}, { title: 'First', body: 'one' });
    const post = created.json();
    expect(created.headers.etag).toBe(`"p${post.id}-1-0"`);
    const url = `/posts/${post.id}`;

    const read = await send('GET', url, null);
    expect(read.json()).toEqual(post);
    expect(read.headers.etag).toBe(created.headers.etag);

    const patched = await send('PATCH', url, ann, {}, { title: 'Second' });
    expect(patched.statusCode).toBe(200);
    expect(patched.headers.etag).toBe(`"p${post.id}-2-0"`);
    expect(await etagOf(url)).toBe(patched.headers.etag);

    const put = await send('PUT', url, ann, {}, { title: 'Third', body: 'three' });
    expect(put.headers.etag).toBe(`"p${post.id}-3-0"`);

    // commentCount changes through a trigger, without a new version: the ETag still moves.
    await createComment(t.app, bob, post.id);
    const withComment = await send('GET', url, null);
    expect(withComment.json().commentCount).toBe(1);
    expect(withComment.headers.etag).toBe(`"p${post.id}-3-1"`);

    // Only read-only members: nothing changes, neither does the ETag.
    const noop = await send('PATCH', url, ann, {}, { id: 1 });
    expect(noop.json()).toEqual(withComment.json());
    expect(noop.headers.etag).toBe(withComment.headers.etag);
  });

  it('a comment: on POST, GET and PATCH, changing with the body', async () => {
    const post = await createPost(t.app, ann);
    const created = await send('POST', `/posts/${post.id}/comments`, bob, {}, { body: 'first' });
    const { id } = created.json();
    const url = `/posts/${post.id}/comments/${id}`;
    expect(created.headers.etag).toBe(`"c${id}-1"`);
    expect(await etagOf(url)).toBe(`"c${id}-1"`);
    const patched = await send('PATCH', url, bob, {}, { body: 'second' });
    expect(patched.headers.etag).toBe(`"c${id}-2"`);
    expect(await etagOf(url)).toBe(`"c${id}-2"`);
  });

  it('a user: the view with e-mail and the public view have different ETags; a change moves both', async () => {
    const url = `/users/${bob.user.id}`;
    const publicTag = await etagOf(url);
    const ownTag = await etagOf(url, bob);
    expect(publicTag).toMatch(/^"u\d+-[A-Za-z0-9_-]{22}"$/);
    expect(ownTag).not.toBe(publicTag);
    expect(await etagOf(url, admin)).toBe(ownTag); // the same representation as bob's own
    expect(await etagOf(url, ann)).toBe(publicTag);
    expect(await etagOf('/users/me', bob)).toBe(ownTag);
    // Neither tag contains the e-mail.
    expect(publicTag + ownTag).not.toContain(bob.user.email.split('@')[0]);

    const patched = await send('PATCH', url, bob, {}, { name: 'Robert' });
    expect(patched.statusCode).toBe(200);
    expect(patched.headers.etag).toBe(await etagOf(url, bob));
    expect(patched.headers.etag).not.toBe(ownTag);
    expect(await etagOf(url)).not.toBe(publicTag);
  });

  it('sign-up answers with the ETag of the view with e-mail', async () => {
    const res = await send(
      'POST',
      '/users',
      null,
      {},
      { name: 'Dee', email: 'dee@example.com', password: 'password-dee' },
    );
    expect(res.statusCode).toBe(201);
    const { id } = res.json();
    const login = await send('POST', '/tokens', null, {}, { email: 'dee@example.com', password: 'password-dee' });
    const own = await send('GET', `/users/${id}`, null, { authorization: `Bearer ${login.json().token}` });
    expect(res.headers.etag).toBe(own.headers.etag);
  });
});

describe('If-None-Match on GET and HEAD', () => {
  it('304 for the current ETag, a list holding it, its weak form and *; 200 otherwise', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    const etag = await etagOf(url);
    for (const header of [etag, `"stale", ${etag}`, `W/${etag}`, '*', ` ${etag} `]) {
      expect304(await send('GET', url, null, { 'if-none-match': header }), etag);
    }
    for (const header of ['"stale"', etag.slice(1, -1), `${etag.slice(0, -1)}x"`]) {
      const res = await send('GET', url, null, { 'if-none-match': header });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ id: post.id });
      expect(res.headers.etag).toBe(etag);
    }
  });

  it('HEAD: 304 when it matches, else 200 with the ETag and no body', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    const etag = await etagOf(url);
    expect304(await send('HEAD', url, null, { 'if-none-match': etag }), etag);
    const head = await send('HEAD', url, null, { 'if-none-match': '"old"' });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
    expect(head.headers.etag).toBe(etag);
  });

  it('after a change the old ETag no longer gives 304', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    const before = await etagOf(url);
    await createComment(t.app, bob, post.id);
    const res = await send('GET', url, null, { 'if-none-match': before });
    expect(res.statusCode).toBe(200);
    expect(res.json().commentCount).toBe(1);
  });

  it('comments and users: 304 as well; a user ETag is per view', async () => {
    const post = await createPost(t.app, ann);
    const comment = await createComment(t.app, bob, post.id);
    const commentUrl = `/posts/${post.id}/comments/${comment.id}`;
    const commentTag = await etagOf(commentUrl);
    expect304(await send('GET', commentUrl, null, { 'if-none-match': commentTag }), commentTag);

    const userUrl = `/users/${ann.user.id}`;
    const ownTag = await etagOf(userUrl, ann);
    expect304(await send('GET', userUrl, ann, { 'if-none-match': ownTag }), ownTag);
    expect304(await send('GET', '/users/me', ann, { 'if-none-match': ownTag }), ownTag);
    // The public view is another representation: the owner's tag does not validate it.
    const anonymous = await send('GET', userUrl, null, { 'if-none-match': ownTag });
    expect(anonymous.statusCode).toBe(200);
    expect(anonymous.json()).toEqual({ id: ann.user.id, name: 'Ann', role: 'user', createdAt: ann.user.createdAt });
  });

  it('a missing resource is still 404', async () => {
    expect404(await send('GET', '/posts/999999', null, { 'if-none-match': '*' }), 'post 999999 does not exist');
  });
});

describe('If-Match on PATCH, PUT and DELETE', () => {
  it('posts: a stale ETag is 412 and changes nothing; the current one and * succeed', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    const stale = await etagOf(url);
    await send('PATCH', url, ann, {}, { title: 'Moved on' });
    const current = await send('GET', url, null);

    expect412(await send('PATCH', url, ann, { 'if-match': stale }, { title: 'Lost update' }));
    expect412(await send('PUT', url, ann, { 'if-match': stale }, { title: 'Lost update', body: 'x' }));
    expect412(await send('DELETE', url, ann, { 'if-match': stale }));
    // If-Match compares strongly: the weak form of the current tag does not match.
    expect412(await send('PATCH', url, ann, { 'if-match': `W/${current.headers.etag}` }, { title: 'Weak' }));
    const unchanged = await send('GET', url, null);
    expect(unchanged.json()).toEqual(current.json());

    const patched = await send(
      'PATCH',
      url,
      ann,
      { 'if-match': `"other", ${current.headers.etag}` },
      { title: 'Mine' },
    );
    expect(patched.statusCode).toBe(200);
    expect(patched.json().title).toBe('Mine');
    const put = await send(
      'PUT',
      url,
      ann,
      { 'if-match': patched.headers.etag as string },
      { title: 'Put', body: 'b' },
    );
    expect(put.statusCode).toBe(200);
    expect((await send('PATCH', url, ann, { 'if-match': '*' }, { title: 'Star' })).statusCode).toBe(200);
    const deleted = await send('DELETE', url, ann, { 'if-match': '*' });
    expect(deleted.statusCode).toBe(204);
    expect(deleted.body).toBe('');
  });

  it('DELETE with the current ETag deletes the post', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    expect((await send('DELETE', url, ann, { 'if-match': await etagOf(url) })).statusCode).toBe(204);
    expect404(await send('GET', url, null), `post ${post.id} does not exist`);
  });

  it('order: 404, then 403, then 412', async () => {
    expect404(
      await send('PATCH', '/posts/999999', ann, { 'if-match': '"x"' }, { title: 'T' }),
      'post 999999 does not exist',
    );
    expect404(await send('DELETE', '/posts/999999', ann, { 'if-match': '*' }), 'post 999999 does not exist');
    const post = await createPost(t.app, ann);
    expectError(
      await send('PATCH', `/posts/${post.id}`, bob, { 'if-match': '"x"' }, { title: 'T' }),
      403,
      'forbidden',
      'only its author or an admin may change this post',
    );
    expect412(await send('PATCH', `/posts/${post.id}`, admin, { 'if-match': '"x"' }, { title: 'T' }));
  });

  it('comments: 412 on a stale ETag for PATCH and DELETE; the current one succeeds', async () => {
    const post = await createPost(t.app, ann);
    const comment = await createComment(t.app, bob, post.id);
    const url = `/posts/${post.id}/comments/${comment.id}`;
    const stale = await etagOf(url);
    const changed = await send('PATCH', url, bob, {}, { body: 'edited' });
    expect412(await send('PATCH', url, bob, { 'if-match': stale }, { body: 'lost' }));
    expect412(await send('DELETE', url, ann, { 'if-match': stale })); // the post's author may delete it
    expect((await send('GET', url, null)).json().body).toBe('edited');
    const patched = await send('PATCH', url, bob, { 'if-match': changed.headers.etag as string }, { body: 'again' });
    expect(patched.statusCode).toBe(200);
    expect((await send('DELETE', url, ann, { 'if-match': patched.headers.etag as string })).statusCode).toBe(204);
    expect404(await send('GET', url, null), `comment ${comment.id} of post ${post.id} does not exist`);
  });

  it('users: 412 on a stale ETag for PATCH; the current one and * succeed', async () => {
    const carl = await signUp(t.app, { name: 'Carl' });
    const url = `/users/${carl.user.id}`;
    const stale = await etagOf(url, carl);
    await send('PATCH', url, carl, {}, { name: 'Carlos' });
    expect412(await send('PATCH', url, carl, { 'if-match': stale }, { name: 'Lost' }));
    // The public view's tag is not the one a writer (the user, an admin) was given.
    expect412(await send('PATCH', url, admin, { 'if-match': await etagOf(url) }, { name: 'Lost' }));
    expect((await send('GET', url, null)).json().name).toBe('Carlos');
    const current = await etagOf(url, admin);
    const ok = await send('PATCH', url, admin, { 'if-match': current }, { name: 'Charles' });
    expect(ok.statusCode).toBe(200);
    expect(ok.json().name).toBe('Charles');
    expect((await send('PATCH', url, carl, { 'if-match': '*' }, { name: 'Chuck' })).statusCode).toBe(200);
  });
});

describe('If-Match is checked atomically with the write', () => {
  it('5 parallel PATCHes of a post with the same ETag: exactly one 200, four 412', async () => {
    const post = await createPost(t.app, ann);
    const url = `/posts/${post.id}`;
    const etag = await etagOf(url);
    const results = await Promise.all(
      [1, 2, 3, 4, 5].map((i) => send('PATCH', url, ann, { 'if-match': etag }, { title: `Racer ${i}` })),
    );
    const statuses = results.map((r) => r.statusCode).sort();
    expect(statuses).toEqual([200, 412, 412, 412, 412]);
    const winner = results.find((r) => r.statusCode === 200)!;
    const final = await send('GET', url, null);
    expect(final.json()).toEqual(winner.json());
    expect(final.headers.etag).toBe(`"p${post.id}-2-0"`);
  });

  it('parallel PATCH and DELETE of a comment with the same ETag: exactly one succeeds', async () => {
    const post = await createPost(t.app, ann);
    const comment = await createComment(t.app, bob, post.id);
    const url = `/posts/${post.id}/comments/${comment.id}`;
    const etag = await etagOf(url);
    const [patch, del] = await Promise.all([
      send('PATCH', url, bob, { 'if-match': etag }, { body: 'racing' }),
      send('DELETE', url, bob, { 'if-match': etag }),
    ]);
    // The PATCH first: the DELETE's ETag is stale. The DELETE first: there is nothing left to PATCH.
    expect([
      [200, 412],
      [404, 204],
    ]).toContainEqual([patch.statusCode, del.statusCode]);
  });

  it('5 parallel PATCHes of a user with the same ETag: exactly one 200', async () => {
    const dora = await signUp(t.app, { name: 'Dora' });
    const url = `/users/${dora.user.id}`;
    const etag = await etagOf(url, dora);
    const results = await Promise.all(
      [1, 2, 3, 4, 5].map((i) => send('PATCH', url, dora, { 'if-match': etag }, { name: `Dora ${i}` })),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([200, 412, 412, 412, 412]);
  });
});
