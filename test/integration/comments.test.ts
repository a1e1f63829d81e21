/**
 * Comments under posts (issue 4): nesting (a comment exists only under its
 * post), lists with the post as parent (404 when missing, totals from
 * comment_counts or a COUNT by author), cursors, validation, the
 * ownership rules, and commentCount staying exact under concurrent writes.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createComment, createPost, useTestApp, type SignedUp } from '../helpers/factories.js';
import { MISCOUNTED_POSTS } from '../helpers/database.js';
import type { Comment } from '../../src/repositories/comments.js';
import { expectError, expect422, expect404, expect401, iso, offsetLinks } from '../helpers/expect.js';
import { idsOf, walk } from '../helpers/lists.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' }); // writes the posts
const bob = t.user({ name: 'Bob' }); // comments
const cat = t.user({ name: 'Cat' }); // a bystander
const admin = t.admin({ name: 'Root' });

const get = (url: string) => t.app.inject({ method: 'GET', url });

const postComment = (who: SignedUp | null, postId: number, payload: object) =>
  t.app.inject({ method: 'POST', url: `/posts/${postId}/comments`, headers: who?.auth ?? {}, payload });

const commentCount = async (postId: number) => (await get(`/posts/${postId}`)).json().commentCount as number;
const counted = async (postId: number) =>
  (await t.app.db.query('SELECT count(*)::int AS n FROM comments WHERE post_id = $1', [postId])).rows[0].n as number;

describe('creating and reading comments', () => {
  let postId: number;
  let otherPostId: number;
  beforeAll(async () => {
    postId = (await createPost(t.app, ann)).id;
    otherPostId = (await createPost(t.app, bob)).id;
  });

  it('a post without comments lists empty in both modes', async () => {
    const offset = await get(`/posts/${postId}/comments`);
    expect(offset.statusCode).toBe(200);
    expect(offset.json()).toEqual({ data: [], page: 1, perPage: 20, total: 0, totalPages: 0 });
    expect(offsetLinks(offset.headers.link)).toBe(
      `</posts/${postId}/comments?page=1&perPage=20>; rel="first", </posts/${postId}/comments?page=1&perPage=20>; rel="last"`,
    );
    const cursor = await get(`/posts/${postId}/comments?limit=10`);
    expect(cursor.json()).toEqual({ data: [], limit: 10, hasMore: false, nextCursor: null, prevCursor: null });
  });

  it('POST: 201, Location, read-only members ignored, commentCount follows', async () => {
    const res = await postComment(bob, postId, {
      body: 'First!',
      id: 1,
      postId: otherPostId,
      authorId: ann.user.id,
      createdAt: 'x',
      updatedAt: 'y',
    });
    expect(res.statusCode).toBe(201);
    const created = res.json();
    expect(created).toEqual({
      id: expect.any(Number),
      postId,
      authorId: bob.user.id,
      body: 'First!',
      createdAt: iso,
      updatedAt: created.createdAt,
    });
    expect(res.headers.location).toBe(`/posts/${postId}/comments/${created.id}`);
    const read = await get(`/posts/${postId}/comments/${created.id}`);
    expect(read.statusCode).toBe(200);
    expect(read.json()).toEqual(created);
    expect(await commentCount(postId)).toBe(1);
    expect(await commentCount(otherPostId)).toBe(0);
    const list = await get(`/posts/${postId}/comments`);
    expect(list.json()).toEqual({ data: [created], page: 1, perPage: 20, total: 1, totalPages: 1 });
  });

  it('POST needs a token and an existing post', async () => {
    expect401(await postComment(null, postId, { body: 'anonymous' }));
    expect404(await postComment(bob, 99999999, { body: 'into the void' }), 'post 99999999 does not exist');
    expect404(await postComment(bob, 0, { body: 'x' }), '/posts/0/comments does not exist');
  });

  it('accepts a body of exactly 10 000 characters', async () => {
    const res = await postComment(cat, otherPostId, { body: 'c'.repeat(10_000) });
    expect(res.statusCode).toBe(201);
    await t.app.inject({ method: 'DELETE', url: `/posts/${otherPostId}/comments/${res.json().id}`, headers: cat.auth });
  });

  it.each([
    [{}, { body: ['is required'] }],
    [{ body: '  \n ' }, { body: ['must not be blank'] }],
    [{ body: '' }, { body: ['must not be blank'] }],
    [{ body: 'x'.repeat(10_001) }, { body: ['must be at most 10000 characters'] }],
    [{ body: 42 }, { body: ['must be a string'] }],
    [{ body: 'ok', text: 'typo' }, { text: ['is not allowed'] }],
    [
      { text: 'typo', title: 'no' },
      { body: ['is required'], text: ['is not allowed'], title: ['is not allowed'] },
    ],
  ])('422 on %j', async (payload, fieldErrors) => {
    expect422(await postComment(bob, postId, payload), fieldErrors);
  });

  it('a comment exists only under its own post', async () => {
    const mine = await createComment(t.app, bob, postId);
    expect404(
      await get(`/posts/${otherPostId}/comments/${mine.id}`),
      `comment ${mine.id} of post ${otherPostId} does not exist`,
    );
    expect404(await get(`/posts/99999999/comments/${mine.id}`), `comment ${mine.id} of post 99999999 does not exist`);
    expect404(await get(`/posts/${postId}/comments/99999999`), `comment 99999999 of post ${postId} does not exist`);
    for (const method of ['PATCH', 'DELETE'] as const) {
      const res = await t.app.inject({
        method,
        url: `/posts/${otherPostId}/comments/${mine.id}`,
        headers: admin.auth,
        ...(method === 'PATCH' ? { payload: { body: 'moved?' } } : {}),
      });
      expect404(res, `comment ${mine.id} of post ${otherPostId} does not exist`);
    }
    expect((await get(`/posts/${postId}/comments/${mine.id}`)).json()).toEqual(mine);
  });

  it.each(['abc', '0', '-3', '2.5', '007'])('comment id %s names nothing: 404', async (id) => {
    const url = `/posts/${postId}/comments/${id}`;
    expect404(await get(url), `${url} does not exist`);
    expect404(await t.app.inject({ method: 'DELETE', url, headers: admin.auth }), `${url} does not exist`);
  });

  it('the list of a missing post is a 404 in both modes', async () => {
    expect404(await get('/posts/99999999/comments'), 'post 99999999 does not exist');
    expect404(await get('/posts/99999999/comments?limit=5'), 'post 99999999 does not exist');
    expect404(await get(`/posts/99999999/comments?author=${bob.user.id}`), 'post 99999999 does not exist');
    expect404(await get('/posts/abc/comments'), '/posts/abc/comments does not exist');
  });
});

describe('changing and deleting comments', () => {
  let postId: number;
  beforeAll(async () => {
    postId = (await createPost(t.app, ann)).id;
  });
  const patch = (who: SignedUp | null, id: number, payload: object, contentType = 'application/json') =>
    t.app.inject({
      method: 'PATCH',
      url: `/posts/${postId}/comments/${id}`,
      headers: { ...(who?.auth ?? {}), 'content-type': contentType },
      payload: JSON.stringify(payload),
    });
  const del = (who: SignedUp | null, id: number) =>
    t.app.inject({ method: 'DELETE', url: `/posts/${postId}/comments/${id}`, headers: who?.auth ?? {} });
  const version = async (id: number) =>
    (await t.app.db.query('SELECT version FROM comments WHERE id = $1', [id])).rows[0].version as number;

  it('PATCH: its author (also as a merge patch) and admins; not the post author, not others', async () => {
    const c = await createComment(t.app, bob, postId, 'original');
    const v = await version(c.id);
    const own = await patch(bob, c.id, { body: 'edited', postId: 5, id: 1 });
    expect(own.statusCode).toBe(200);
    expect(own.json()).toEqual({ ...c, body: 'edited', updatedAt: iso });
    expect(await version(c.id)).toBe(v + 1);
    const merged = await patch(bob, c.id, { body: 'merged' }, 'application/merge-patch+json');
    expect(merged.json()).toEqual({ ...c, body: 'merged', updatedAt: iso });
    const denied = 'only its author or an admin may change this comment';
    expectError(await patch(ann, c.id, { body: 'post author edit' }), 403, 'forbidden', denied);
    expectError(await patch(cat, c.id, { body: 'vandal' }), 403, 'forbidden', denied);
    const moderated = await patch(admin, c.id, { body: 'moderated' });
    expect(moderated.json()).toEqual({ ...c, body: 'moderated', updatedAt: iso });
    expect((await get(`/posts/${postId}/comments/${c.id}`)).json()).toEqual(moderated.json());
  });

  it('PATCH with nothing writable changes nothing', async () => {
    const c = await createComment(t.app, bob, postId, 'stays');
    const res = await patch(bob, c.id, { authorId: cat.user.id });
    expect(res.json()).toEqual(c);
    expect(await version(c.id)).toBe(1);
  });

  it('PATCH: 401 anonymous, 422 before 404, 404 before 403', async () => {
    const c = await createComment(t.app, bob, postId);
    expect401(await patch(null, c.id, { body: 'x' }));
    expect422(await patch(cat, 99999999, { body: ' ' }), { body: ['must not be blank'] });
    expect422(await patch(bob, c.id, { body: 'x'.repeat(10_001), extra: true }), {
      body: ['must be at most 10000 characters'],
      extra: ['is not allowed'],
    });
    expect404(await patch(cat, 99999999, { body: 'x' }), `comment 99999999 of post ${postId} does not exist`);
  });

  it("DELETE: its author, the post's author, an admin; 403 for others, 401 anonymous", async () => {
    const [byAuthor, byPostAuthor, byAdmin] = [
      await createComment(t.app, bob, postId),
      await createComment(t.app, bob, postId),
      await createComment(t.app, bob, postId),
    ];
    const before = await commentCount(postId);
    expect401(await del(null, byAuthor.id));
    expectError(
      await del(cat, byAuthor.id),
      403,
      'forbidden',
      "only its author, the post's author or an admin may delete this comment",
    );
    for (const [who, c] of [
      [bob, byAuthor],
      [ann, byPostAuthor],
      [admin, byAdmin],
    ] as const) {
      const res = await del(who, c.id);
      expect(res.statusCode).toBe(204);
      expect(res.body).toBe('');
      expect404(await get(`/posts/${postId}/comments/${c.id}`), `comment ${c.id} of post ${postId} does not exist`);
    }
    expect(await commentCount(postId)).toBe(before - 3);
    expect(await commentCount(postId)).toBe(await counted(postId));
    expect404(await del(bob, byAuthor.id), `comment ${byAuthor.id} of post ${postId} does not exist`);
    expect404(await del(cat, byAuthor.id), `comment ${byAuthor.id} of post ${postId} does not exist`);
  });

  it('deleting the post deletes its comments', async () => {
    const doomed = (await createPost(t.app, cat)).id;
    const cs = [await createComment(t.app, bob, doomed), await createComment(t.app, ann, doomed)];
    expect((await t.app.inject({ method: 'DELETE', url: `/posts/${doomed}`, headers: cat.auth })).statusCode).toBe(204);
    expect(await counted(doomed)).toBe(0);
    for (const c of cs)
      expect404(await get(`/posts/${doomed}/comments/${c.id}`), `comment ${c.id} of post ${doomed} does not exist`);
    expect404(await postComment(bob, doomed, { body: 'too late' }), `post ${doomed} does not exist`);
  });
});

describe('comment lists', () => {
  let postId: number;
  let otherPostId: number;
  let all: Comment[];
  // Four created_at values a microsecond apart, repeated: long runs of equal keys.
  const key = (id: number) => id % 4;
  const expected = (ids: number[], sort: string) => {
    const asc = [...ids].sort((a, b) => (sort.endsWith('createdAt') ? key(a) - key(b) : 0) || a - b);
    return sort.startsWith('-') ? asc.reverse() : asc;
  };

  beforeAll(async () => {
    postId = (await createPost(t.app, ann, { title: 'busy' })).id;
    otherPostId = (await createPost(t.app, ann, { title: 'other' })).id;
    all = [];
    for (let i = 0; i < 25; i++) all.push(await createComment(t.app, i % 5 === 0 ? cat : bob, postId, `comment ${i}`));
    await createComment(t.app, cat, otherPostId);
    await t.app.db.query(
      `UPDATE comments SET created_at = '2020-01-01T00:00:00Z'::timestamptz + (id % 4) * interval '1 microsecond'
       WHERE post_id = $1`,
      [postId],
    );
    all = (await get(`/posts/${postId}/comments?perPage=100`)).json().data;
  });

  it('offset arithmetic: page 3 of perPage 10 holds items 21–25', async () => {
    const res = await get(`/posts/${postId}/comments?page=3&perPage=10`);
    expect(res.json()).toEqual({ data: all.slice(20, 25), page: 3, perPage: 10, total: 25, totalPages: 3 });
    expect(offsetLinks(res.headers.link)).toBe(
      [
        `</posts/${postId}/comments?page=1&perPage=10>; rel="first"`,
        `</posts/${postId}/comments?page=2&perPage=10>; rel="prev"`,
        `</posts/${postId}/comments?page=3&perPage=10>; rel="last"`,
      ].join(', '),
    );
    const past = await get(`/posts/${postId}/comments?page=4&perPage=10`);
    expect(past.json()).toEqual({ data: [], page: 4, perPage: 10, total: 25, totalPages: 3 });
  });

  it('author filter: totals by COUNT, unknown author empty', async () => {
    const cats = all.filter((c) => c.authorId === cat.user.id);
    const res = await get(`/posts/${postId}/comments?author=${cat.user.id}&perPage=2&page=2`);
    expect(res.json()).toEqual({ data: cats.slice(2, 4), page: 2, perPage: 2, total: 5, totalPages: 3 });
    const nobody = await get(`/posts/${postId}/comments?author=999999`);
    expect(nobody.json()).toEqual({ data: [], page: 1, perPage: 20, total: 0, totalPages: 0 });
    const annNone = await get(`/posts/${postId}/comments?author=${ann.user.id}&limit=3`);
    expect(annNone.json()).toEqual({ data: [], limit: 3, hasMore: false, nextCursor: null, prevCursor: null });
  });

  it.each(['id', '-id', 'createdAt', '-createdAt'])(
    'sort=%s: offset order is right and cursor walks equal it',
    async (sort) => {
      const ids = all.map((c) => c.id);
      const offset = await idsOf(t.app, `/posts/${postId}/comments?sort=${sort}&perPage=100`);
      expect(offset).toEqual(expected(ids, sort));
      expect(await walk(t.app, `/posts/${postId}/comments?sort=${sort}&limit=4`)).toEqual(offset);
      expect(await walk(t.app, `/posts/${postId}/comments?sort=${sort}&limit=25`)).toEqual(offset);
      const bobs = ids.filter((id) => all.find((c) => c.id === id)!.authorId === bob.user.id);
      expect(await walk(t.app, `/posts/${postId}/comments?author=${bob.user.id}&sort=${sort}&limit=3`)).toEqual(
        expected(bobs, sort),
      );
    },
  );

  it('a deleted comment still anchors a cursor; a comment of another post never does', async () => {
    const order = await idsOf(t.app, `/posts/${postId}/comments?sort=-createdAt&perPage=100`);
    const gone = order[6]!;
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/posts/${postId}/comments/${gone}`, headers: ann.auth }))
        .statusCode,
    ).toBe(204);
    const res = await get(`/posts/${postId}/comments?sort=-createdAt&after=${gone}&limit=5`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      data: order.slice(7, 12).map((id) => all.find((c) => c.id === id)),
      limit: 5,
      hasMore: true,
      nextCursor: order[11],
      prevCursor: order[7],
    });
    // The next link carries the anchor's sort key as stored (microseconds), so the walk resumes there.
    const { rows } = await t.app.db.query(
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS k FROM comments WHERE id = $1`,
      [order[11]],
    );
    const afterKey = encodeURIComponent(rows[0].k);
    expect(res.headers.link).toContain(
      `</posts/${postId}/comments?sort=-createdAt&after=${order[11]}&limit=5&afterKey=${afterKey}>; rel="next"`,
    );
    expect(res.headers.link).toContain(
      `</posts/${postId}/comments?sort=-createdAt&limit=5&before=${order[7]}&beforeKey=`,
    );
    const [foreign] = await idsOf(t.app, `/posts/${otherPostId}/comments`);
    const after = ['does not name an item of this list'];
    expect422(await get(`/posts/${postId}/comments?after=${foreign}`), { after });
    expect422(await get(`/posts/${postId}/comments?after=99999999`), { after });
    expect422(await get(`/posts/${postId}/comments?author=${ann.user.id}&after=${order[0]}`), { after });
  });

  it.each([
    ['?sort=title', { sort: ['must be one of: id, -id, createdAt, -createdAt'] }],
    ['?sort=updatedAt', { sort: ['must be one of: id, -id, createdAt, -createdAt'] }],
    ['?perPage=0', { perPage: ['must be at least 1'] }],
    ['?perPage=101', { perPage: ['must be at most 100'] }],
    ['?limit=101', { limit: ['must be at most 100'] }],
    ['?author=x', { author: ['must be an integer'] }],
    ['?postId=1', { postId: ['is not allowed'] }],
  ])('422 on %s', async (query, fieldErrors) => {
    expect422(await get(`/posts/${postId}/comments${query}`), fieldErrors);
  });

  it('mixing the pagination modes is a 422', async () => {
    const res = await get(`/posts/${postId}/comments?page=2&limit=5`);
    expectError(res, 422, 'validation', 'use either page/perPage (offset mode) or after/limit (cursor mode)', {
      limit: ['cannot be combined with page, perPage or snapshot'],
    });
  });
});

describe('commentCount under concurrency', () => {
  it('stays exact through 20 parallel creates and 10 parallel deletes', async () => {
    const postId = (await createPost(t.app, ann, { title: 'hot' })).id;
    const existing: Comment[] = [];
    for (let i = 0; i < 10; i++) existing.push(await createComment(t.app, i % 2 ? bob : cat, postId));
    expect(await commentCount(postId)).toBe(10);

    const results = await Promise.all([
      ...Array.from({ length: 20 }, (_, i) => postComment([bob, cat, admin][i % 3]!, postId, { body: `burst ${i}` })),
      ...existing.map((c, i) =>
        t.app.inject({
          method: 'DELETE',
          url: `/posts/${postId}/comments/${c.id}`,
          headers: (i % 2 ? ann : admin).auth,
        }),
      ),
    ]);
    expect(results.map((r) => r.statusCode)).toEqual([...Array(20).fill(201), ...Array(10).fill(204)]);
    expect(await counted(postId)).toBe(20);
    expect(await commentCount(postId)).toBe(20);
    expect((await get(`/posts/${postId}/comments?perPage=1`)).json().total).toBe(20);
  });

  it('stays exact when the post is deleted while its comments are being written', async () => {
    const postId = (await createPost(t.app, ann, { title: 'doomed' })).id;
    const neighbour = (await createPost(t.app, ann, { title: 'neighbour' })).id;
    const existing: Comment[] = [];
    for (let i = 0; i < 6; i++) existing.push(await createComment(t.app, bob, postId));
    const results = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) =>
        postComment(i % 2 ? bob : cat, i % 3 ? postId : neighbour, { body: `x${i}` }),
      ),
      ...existing.map((c) =>
        t.app.inject({ method: 'DELETE', url: `/posts/${postId}/comments/${c.id}`, headers: bob.auth }),
      ),
      t.app.inject({ method: 'DELETE', url: `/posts/${postId}`, headers: ann.auth }),
    ]);
    const statuses = results.map((r) => r.statusCode);
    // Every request either happened before the post went or found it gone: no 5xx, no deadlock.
    for (const s of statuses.slice(0, 10)) expect([201, 404]).toContain(s);
    for (const s of statuses.slice(10, 16)) expect([204, 404]).toContain(s);
    expect(statuses[16]).toBe(204);
    expect(await counted(postId)).toBe(0);
    expect(await commentCount(neighbour)).toBe(await counted(neighbour));
    const { rows } = await t.app.db.query(MISCOUNTED_POSTS);
    expect(rows[0].n).toBe(0);
  });

  it('is kept beside the post: a comment leaves the post row as it was (no new row version)', async () => {
    const postId = (await createPost(t.app, ann, { title: 'unchanged row' })).id;
    const version = async () =>
      (await t.app.db.query<{ xmin: string }>('SELECT xmin::text FROM posts WHERE id = $1', [postId])).rows[0]!.xmin;
    const before = await version();
    await createComment(t.app, bob, postId);
    expect(await version()).toBe(before);
    expect(await commentCount(postId)).toBe(1);
  });
});
