/**
 * Richer reads (docs/api.md §10): full-text search, creation-time ranges,
 * estimated totals, include=author, sparse fields, paging back with before/prev,
 * alone and combined, against real PostgreSQL. Small data: a dozen posts whose
 * titles, bodies and creation times the tests set; the estimated total is last,
 * with its 10 001 rows inserted in one statement.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { useTestApp, type SignedUp } from '../helpers/factories.js';
import { onTopology } from '../helpers/database.js';
import { postsRepository, type Post } from '../../src/repositories/posts.js';
import { createPool, withTransaction, type Queryable } from '../../src/db/pool.js';
import type { Statement } from '../../src/db/sql.js';
import { expect404, expect422 } from '../helpers/expect.js';
import { WALK_LIMIT } from '../../src/db/pagination/cursor.js';
import { RANKED_FROM_OFFSET } from '../../src/db/pagination/common.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });
const posts: Post[] = [];

const get = (url: string, headers: Record<string, string> = {}) => t.app.inject({ method: 'GET', url, headers });
const ids = async (url: string) => {
  const res = await get(url);
  expect(res.statusCode, res.body).toBe(200);
  return (res.json().data as { id: number }[]).map((item) => item.id);
};
/**
 * Ann's posts `<title> 1` … `<title> <count>`, a second apart from `from`. A fixture, not what is measured: on a busy
 * machine one statement of ten thousand rows (and their triggers) may outlast the statement timeout, so it has none.
 */
const bulkPosts = (title: string, body: string, from: string, count: number) =>
  withTransaction(t.app.db, async (client) => {
    await client.query('SET LOCAL statement_timeout = 0');
    await client.query(
      `INSERT INTO posts (author_id, title, body, created_at, updated_at)
       SELECT $1, $2 || ' ' || g, $3, $4::timestamptz + g * interval '1 second', now() FROM generate_series(1, $5::int) g`,
      [ann.user.id, title, body, from, count],
    );
  });
const link = (header: unknown, rel: string) => new RegExp(`<([^>]+)>; rel="${rel}"`).exec(String(header ?? ''))?.[1];

const TEXTS: [SignedUp | 'bob', string, string][] = [
  ['bob', 'Crème Brûlée at the Café', 'A dessert recipe, with caramel.'],
  ['bob', 'CREME BRULEE again', 'Another recipe; this one burns the sugar.'],
  ['bob', 'Brûlée crème?', 'Words the other way round.'],
  ['bob', 'Keyset pagination', 'Cursors beat offsets on big tables.'],
  ['bob', 'Offset pagination', 'Page numbers are simple, and slow deep down.'],
  ['bob', 'Naïve caching', 'The cache answered stale data.'],
  ['bob', 'Postgres full-text search', 'tsvector, tsquery and a GIN index.'],
  ['bob', 'Dates and times', 'Milliseconds in JSON, microseconds in PostgreSQL.'],
];

beforeAll(async () => {
  for (const [i, [, title, body]] of TEXTS.entries()) {
    const who = i % 2 === 0 ? ann : bob;
    const res = await t.app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload: { title, body } });
    expect(res.statusCode).toBe(201);
    posts.push(res.json());
  }
  // Creation times one day apart, with microseconds the API does not show: post i at 2026-01-0(i+1)T00:00:00.123456Z.
  await t.app.db.query(
    `UPDATE posts SET created_at = '2026-01-01T00:00:00.123456Z'::timestamptz + (id - $1) * interval '1 day', updated_at = created_at`,
    [posts[0]!.id],
  );
});

const id = (i: number) => posts[i]!.id;

describe('q: full-text search', () => {
  it('is case- and accent-insensitive, over title and body', async () => {
    expect(await ids('/posts?q=creme')).toEqual([id(0), id(1), id(2)]);
    expect(await ids('/posts?q=BRÛLÉE')).toEqual([id(0), id(1), id(2)]);
    expect(await ids('/posts?q=cafe')).toEqual([id(0)]);
    expect(await ids('/posts?q=naive')).toEqual([id(5)]);
    expect(await ids('/posts?q=caramel')).toEqual([id(0)]);
  });

  it('all words must match; "phrases" keep their order; -word excludes; or', async () => {
    expect(await ids('/posts?q=creme%20recipe')).toEqual([id(0), id(1)]);
    expect(await ids(`/posts?q=${encodeURIComponent('"creme brulee"')}`)).toEqual([id(0), id(1)]);
    expect(await ids(`/posts?q=${encodeURIComponent('"brulee creme"')}`)).toEqual([id(2)]);
    expect(await ids('/posts?q=creme%20-caramel')).toEqual([id(1), id(2)]);
    expect(await ids('/posts?q=keyset%20or%20offset')).toEqual([id(3), id(4)]);
    expect(await ids('/posts?q=pagination%20-%22page%20numbers%22')).toEqual([id(3)]);
  });

  it('a query without words matches nothing; 1–200 characters', async () => {
    const none = await get('/posts?q=%22%22%20-');
    expect(none.json()).toMatchObject({ data: [], total: 0, totalPages: 0, totalEstimated: false });
    expect422(await get('/posts?q='), { q: ['must not be empty'] });
    expect((await get(`/posts?q=${'a'.repeat(200)}`)).statusCode).toBe(200);
    expect422(await get(`/posts?q=${'a'.repeat(201)}`), { q: ['must be at most 200 characters'] });
  });

  it('combines with author, sort, both modes, dates, and /users/{id}/posts', async () => {
    expect(await ids(`/posts?q=recipe&author=${ann.user.id}`)).toEqual([id(0)]);
    expect(await ids(`/users/${bob.user.id}/posts?q=recipe`)).toEqual([id(1)]);
    expect(await ids('/posts?q=pagination&sort=-title')).toEqual([id(4), id(3)]);
    expect(await ids('/posts?q=creme&createdAfter=2026-01-01T00:00:00.123Z')).toEqual([id(1), id(2)]);
    const first = await get('/posts?q=creme&limit=2&sort=-createdAt');
    expect(first.json()).toMatchObject({ hasMore: true, nextCursor: id(1), prevCursor: null });
    const second = await get(link(first.headers.link, 'next')!);
    expect(second.json()).toMatchObject({ data: [{ id: id(0) }], hasMore: false, prevCursor: id(0) });
    expect404(await get('/users/999999/posts?q=creme'), 'user 999999 does not exist');
  });

  it('follows every write: a new title is found, the old one is not', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/posts/${id(7)}`,
      headers: bob.auth,
      payload: { title: 'Calendars' },
    });
    expect(res.statusCode).toBe(200);
    expect(await ids('/posts?q=calendars')).toEqual([id(7)]);
    expect(await ids('/posts?q=dates')).toEqual([]);
    // The cursor anchor is checked against the list, not the search: a post edited out of it still anchors.
    expect((await get(`/posts?q=creme&after=${id(7)}`)).statusCode).toBe(200);
  });
});

describe('createdAfter / createdBefore', () => {
  // Post 3 was created at 2026-01-04T00:00:00.123456Z and is shown as …00.123Z.
  it('are exclusive at the milliseconds the API shows', async () => {
    expect((await get(`/posts/${id(3)}`)).json().createdAt).toBe('2026-01-04T00:00:00.123Z');
    const between = (after: string, before: string) =>
      ids(`/posts?createdAfter=${encodeURIComponent(after)}&createdBefore=${encodeURIComponent(before)}`);
    expect(await between('2026-01-04T00:00:00.123Z', '2026-01-05T00:00:00.123Z')).toEqual([]);
    expect(await between('2026-01-04T00:00:00.122999Z', '2026-01-05T00:00:00.123Z')).toEqual([id(3)]);
    expect(await between('2026-01-03T00:00:00.123Z', '2026-01-04T00:00:00.123Z')).toEqual([]);
    expect(await between('2026-01-03T00:00:00.123Z', '2026-01-04T00:00:00.1231Z')).toEqual([id(3)]);
    // Digits past the microsecond decide nothing they should not.
    expect(await between('2026-01-04T00:00:00.1229999999Z', '2026-01-04T00:00:00.1230000001Z')).toEqual([id(3)]);
    expect(await between('2026-01-04T00:00:00.1230000001Z', '2026-01-05T00:00:00Z')).toEqual([]);
    // Offsets are honoured.
    expect(await between('2026-01-04T01:00:00.122+01:00', '2026-01-03T19:00:00.124-05:00')).toEqual([id(3)]);
  });

  it('work with every sort, cursor walks and the author filter', async () => {
    const range = 'createdAfter=2026-01-02T00:00:00Z&createdBefore=2026-01-06T00:00:00Z';
    expect(await ids(`/posts?${range}`)).toEqual([id(1), id(2), id(3), id(4)]);
    expect(await ids(`/posts?${range}&sort=-id`)).toEqual([id(4), id(3), id(2), id(1)]);
    expect(await ids(`/posts?${range}&sort=-createdAt&limit=3`)).toEqual([id(4), id(3), id(2)]);
    expect(await ids(`/posts?${range}&author=${bob.user.id}`)).toEqual([id(1), id(3)]);
    expect(await ids(`/users/${ann.user.id}/posts?${range}&sort=-id`)).toEqual([id(4), id(2)]);
    expect(await ids('/posts?createdAfter=2027-01-01T00:00:00Z')).toEqual([]);
    expect(await ids('/posts?createdAfter=2027-01-01T00:00:00Z&sort=-id')).toEqual([]);
    const res = await get(`/posts?${range}&perPage=3`);
    expect(res.json()).toMatchObject({ total: 4, totalPages: 2, totalEstimated: false });
  });

  it('apply to comments', async () => {
    const postId = id(6);
    const made: number[] = [];
    for (const body of ['one', 'two', 'three']) {
      const res = await t.app.inject({
        method: 'POST',
        url: `/posts/${postId}/comments`,
        headers: ann.auth,
        payload: { body },
      });
      made.push(res.json().id);
    }
    await t.app.db.query(
      `UPDATE comments SET created_at = '2026-02-01T00:00:00.5Z'::timestamptz + (id - $1) * interval '1 hour' WHERE post_id = $2`,
      [made[0], postId],
    );
    const url = `/posts/${postId}/comments?createdAfter=2026-02-01T00:00:00.500Z&createdBefore=2026-02-01T02:00:00.501Z`;
    expect(await ids(url)).toEqual([made[1], made[2]]);
    expect((await get(url)).json()).toMatchObject({ total: 2, totalEstimated: false });
    expect(await ids(`${url}&limit=1&sort=-createdAt`)).toEqual([made[2]]);
  });

  // Year 0000 is RFC 3339 syntax: the message names the years taken, as docs/api.md does.
  const NOT_A_DATE_TIME =
    'must be an RFC 3339 date-time from year 0001 on, with Z or an offset within ±14:00, e.g. 2026-11-22T10:00:00Z';

  it('year 0, here and in docs/api.md: one message, the one the service sends', async () => {
    for (const url of ['/posts?createdAfter=0000-01-01T00:00:00Z', '/posts?createdBefore=0000-12-31T23:59:59Z'])
      expect422(await get(url), { [url.includes('After') ? 'createdAfter' : 'createdBefore']: [NOT_A_DATE_TIME] });
    const docs = readFileSync('docs/api.md', 'utf8').replace(/\s+/g, ' ');
    const quoted = /`createdAfter=0000-01-01T00:00:00Z`[^"]*"([^"]+)"/.exec(docs)?.[1];
    expect(quoted).toBe(NOT_A_DATE_TIME);
  });

  it('must be RFC 3339 date-times with an offset', async () => {
    for (const value of ['2026-01-01', '2026-01-01T00:00:00', 'yesterday', '2026-13-01T00:00:00Z']) {
      expect422(await get(`/posts?createdAfter=${value}`), { createdAfter: [NOT_A_DATE_TIME] });
    }
    expect422(await get('/posts/1/comments?createdBefore=now'), { createdBefore: [NOT_A_DATE_TIME] });
    expect422(await get('/users?createdAfter=2026-01-01T00:00:00Z'), { createdAfter: ['is not allowed'] });
  });

  it('a date-time PostgreSQL cannot hold (an offset past ±14:00, year 0000, 30 February) is a 422 naming it, never a 500', async () => {
    const bad = [
      '2020-01-01T00:00:00+19:26',
      '2020-01-01T00:00:00-14:01',
      '0000-01-01T00:00:00Z',
      '2026-02-30T00:00:00Z',
      '2026-01-01T24:00:00Z',
      '2026-01-01 00:00:00Z',
      '2026-01-01T00:00:00+0100',
      '2026-01-01T00:00:00+01',
    ];
    for (const value of bad) {
      expect422(await get(`/posts?createdAfter=${encodeURIComponent(value)}`), { createdAfter: [NOT_A_DATE_TIME] });
    }
    for (const value of [
      '2020-01-01T00:00:00+14:00',
      '2020-01-01t00:00:00.5-14:00',
      '0001-01-01T00:00:00+14:00',
      '9999-12-31T23:59:59-14:00',
      '2016-12-31T23:59:60z',
    ]) {
      expect((await get(`/posts?createdAfter=${encodeURIComponent(value)}`)).statusCode, value).toBe(200);
    }
    // Every offset RFC 3339's syntax allows: within ±14:00 a 200, beyond it a 422 naming the parameter.
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 23 }),
        fc.integer({ min: 0, max: 59 }),
        fc.boolean(),
        fc.boolean(),
        async (h, m, minus, before) => {
          const name = before ? 'createdBefore' : 'createdAfter';
          const offset = `${minus ? '-' : '+'}${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`;
          const res = await get(
            `/posts/${posts[0]!.id}/comments?${name}=${encodeURIComponent(`2020-06-15T12:00:00${offset}`)}`,
          );
          if (h * 60 + m <= 14 * 60) expect(res.statusCode, offset).toBe(200);
          else expect422(res, { [name]: [NOT_A_DATE_TIME] });
        },
      ),
      { numRuns: 80 },
    );
  });
});

describe('totals', () => {
  it('unfiltered and author lists keep their exact totals, without totalEstimated', async () => {
    expect((await get('/posts?perPage=1')).json()).toEqual(
      expect.not.objectContaining({ totalEstimated: expect.anything() }),
    );
    expect((await get(`/posts?author=${bob.user.id}`)).json()).toMatchObject({ total: 4 });
    expect('totalEstimated' in (await get(`/posts?author=${bob.user.id}`)).json()).toBe(false);
  });
});

describe('include=author', () => {
  it('embeds { id, name } in post and comment lists and single items', async () => {
    const list = (await get('/posts?include=author&perPage=2')).json();
    expect(list.data).toEqual([
      {
        ...posts[0],
        title: expect.any(String),
        author: { id: ann.user.id, name: 'Ann' },
        createdAt: expect.any(String),
        updatedAt: expect.any(String),
      },
      expect.objectContaining({ id: id(1), author: { id: bob.user.id, name: 'Bob' } }),
    ]);
    const cursor = (await get(`/users/${bob.user.id}/posts?include=author&limit=1`)).json();
    expect(cursor.data[0].author).toEqual({ id: bob.user.id, name: 'Bob' });
    const one = await get(`/posts/${id(1)}?include=author`);
    expect(one.json()).toMatchObject({ id: id(1), authorId: bob.user.id, author: { id: bob.user.id, name: 'Bob' } });
    const comments = (await get(`/posts/${id(6)}/comments?include=author`)).json();
    expect(comments.data.map((c: { author: unknown }) => c.author)).toEqual(
      Array(3).fill({ id: ann.user.id, name: 'Ann' }),
    );
    const [commentId] = comments.data.map((c: { id: number }) => c.id);
    expect((await get(`/posts/${id(6)}/comments/${commentId}?include=author`)).json().author).toEqual({
      id: ann.user.id,
      name: 'Ann',
    });
  });

  it('any other value is a 422', async () => {
    for (const url of [
      '/posts?include=comments',
      '/posts?include=author,author',
      `/posts/${id(0)}?include=`,
      '/posts/1/comments?include=post',
    ]) {
      expect((await get(url)).statusCode).toBe(422);
      expect(Object.keys((await get(url)).json().fieldErrors)).toEqual(['include']);
    }
    expect422(await get('/users?include=author'), { include: ['is not allowed'] });
  });

  it('a page shows a new name at once', async () => {
    const url = `/posts?include=author&fields=title&author=${ann.user.id}`;
    const one = `/posts/${id(0)}?include=author&fields=title`;
    const rename = async (name: string) =>
      (await t.app.inject({ method: 'PATCH', url: `/users/${ann.user.id}`, headers: ann.auth, payload: { name } }))
        .statusCode;
    expect(await rename('Annie')).toBe(200);
    expect((await get(url)).json().data[0].author.name).toBe('Annie');
    expect((await get(one)).json().author.name).toBe('Annie');
    expect(await rename('Ann')).toBe(200);
  });
});

describe('fields', () => {
  it('cuts posts, comments and users to the asked fields, id always', async () => {
    expect((await get('/posts?fields=title&perPage=2')).json().data).toEqual([
      { id: id(0), title: posts[0]!.title },
      { id: id(1), title: posts[1]!.title },
    ]);
    expect((await get(`/posts/${id(3)}?fields=createdAt,id`)).json()).toEqual({
      id: id(3),
      createdAt: '2026-01-04T00:00:00.123Z',
    });
    expect((await get(`/posts/${id(3)}?fields=authorId&include=author`)).json()).toEqual({
      id: id(3),
      authorId: bob.user.id,
      author: { id: bob.user.id, name: 'Bob' },
    });
    const comments = (await get(`/posts/${id(6)}/comments?fields=body&limit=1`)).json();
    expect(comments.data).toEqual([{ id: expect.any(Number), body: 'one' }]);
    expect((await get(`/posts/${id(6)}/comments/${comments.data[0].id}?fields=postId`)).json()).toEqual({
      id: comments.data[0].id,
      postId: id(6),
    });
    expect((await get(`/users?fields=name&sort=name&limit=1`)).json().data).toEqual([{ id: ann.user.id, name: 'Ann' }]);
    // The e-mail still shows only to its owner.
    expect((await get(`/users/${ann.user.id}?fields=email`)).json()).toEqual({ id: ann.user.id });
    const own = await get(`/users/${ann.user.id}?fields=email`, ann.auth);
    expect(own.json()).toEqual({ id: ann.user.id, email: ann.user.email });
    expect(own.headers['cache-control']).toBe('private, no-store');
  });

  it('an unknown or repeated name is a 422 naming fields', async () => {
    const message =
      'must be a comma-separated list of distinct fields among id, title, body, authorId, commentCount, createdAt, updatedAt';
    for (const fields of ['tittle', 'title,', ',title', 'title,,body', 'author', 'TITLE', '']) {
      expect422(await get(`/posts?fields=${fields}`), { fields: [message] });
    }
    expect422(await get(`/posts/${id(0)}?fields=title,body,title`), { fields: ['names title more than once'] });
    expect422(await get(`/posts?fields=title,body,title,body,title`), { fields: ['names title, body more than once'] });
    expect422(await get(`/posts?fields=title,tittle,title`), { fields: [message, 'names title more than once'] });
    expect422(await get(`/posts?fields=title&fields=tittle&fields=title`), {
      fields: [message, 'names title more than once'],
    });
    expect422(await get('/users?fields=password'), {
      fields: ['must be a comma-separated list of distinct fields among id, name, role, email, createdAt'],
    });
  });

  it('a sparse or embedded representation has its own ETag; If-Match takes the full one', async () => {
    const full = await get(`/posts/${id(5)}`);
    const sparse = await get(`/posts/${id(5)}?fields=title`);
    const embedded = await get(`/posts/${id(5)}?include=author`);
    const tags = [full, sparse, embedded].map((res) => res.headers.etag as string);
    expect(new Set(tags).size).toBe(3);
    expect((await get(`/posts/${id(5)}?fields=title`, { 'if-none-match': tags[1]! })).statusCode).toBe(304);
    expect((await get(`/posts/${id(5)}`, { 'if-none-match': tags[1]! })).statusCode).toBe(200);
    const patch = (etag: string) =>
      t.app.inject({
        method: 'PATCH',
        url: `/posts/${id(5)}`,
        headers: { ...bob.auth, 'if-match': etag },
        payload: { body: `edited ${etag}` },
      });
    expect((await patch(tags[1]!)).statusCode).toBe(412);
    expect((await patch(tags[0]!)).statusCode).toBe(200);
    // The edit moves the sparse tag too only when the asked fields change.
    expect((await get(`/posts/${id(5)}?fields=title`)).headers.etag).toBe(tags[1]);
    expect((await get(`/posts/${id(5)}?fields=body`)).headers.etag).not.toBe(tags[1]);
  });
});

describe('before / prevCursor / prev links', () => {
  const walk = async (url: string, rel: 'next' | 'prev') => {
    const pages: number[][] = [];
    for (let next: string | undefined = url; next !== undefined;) {
      const res = await get(next);
      expect(res.statusCode, res.body).toBe(200);
      const body = res.json();
      pages.push(body.data.map((item: { id: number }) => item.id));
      const cursor = rel === 'next' ? body.nextCursor : body.prevCursor;
      expect(cursor).toBe(cursor === null ? null : rel === 'next' ? body.data.at(-1).id : body.data[0].id);
      next = link(res.headers.link, rel);
      expect(next === undefined).toBe(cursor === null);
    }
    return pages;
  };

  it.each(['id', '-id', 'createdAt', '-createdAt', 'title', '-title', 'updatedAt'])(
    'sort=%s: walking back from the last page gives the forward pages in reverse',
    async (sort) => {
      const forward = await walk(`/posts?sort=${sort}&limit=3`, 'next');
      expect(forward.flat()).toHaveLength(posts.length);
      const lastPage = forward.at(-1)!;
      const start = await get(`/posts?sort=${sort}&limit=3&after=${forward.at(-2)!.at(-1)}`);
      expect(start.json().data.map((p: { id: number }) => p.id)).toEqual(lastPage);
      const backward = await walk(link(start.headers.link, 'prev')!, 'prev');
      // Pages going back hold the 3 items before each page's first, in the sort order.
      for (const page of backward.slice(0, -1)) expect(page).toHaveLength(3);
      expect(backward.reverse().flat()).toEqual(forward.flat().slice(0, -lastPage.length));
    },
  );

  it('a before page points forward again: nextCursor is its last item, next resumes after it', async () => {
    const res = await get(`/posts?before=${id(4)}&limit=2`);
    expect(res.json()).toMatchObject({
      data: [{ id: id(2) }, { id: id(3) }],
      hasMore: true,
      nextCursor: id(3),
      prevCursor: id(2),
    });
    expect(await ids(link(res.headers.link, 'next')!)).toEqual([id(4), id(5)]);
    const start = await get(`/posts?before=${id(1)}&limit=2`);
    expect(start.json()).toMatchObject({ data: [{ id: id(0) }], hasMore: true, nextCursor: id(0), prevCursor: null });
    expect(link(start.headers.link, 'prev')).toBeUndefined();
    const none = await get(`/posts?before=${id(0)}`);
    expect(none.json()).toEqual({ data: [], limit: 20, hasMore: false, nextCursor: null, prevCursor: null });
  });

  it('combines with search, dates, fields and include', async () => {
    const res = await get(`/posts?q=creme&before=${id(2)}&limit=1&fields=title&include=author`);
    expect(res.json()).toEqual({
      data: [{ id: id(1), title: posts[1]!.title, author: { id: bob.user.id, name: 'Bob' } }],
      limit: 1,
      hasMore: true,
      nextCursor: id(1),
      prevCursor: id(1),
    });
    expect(await ids(link(res.headers.link, 'prev')!)).toEqual([id(0)]);
    const dated = await get(`/posts?createdBefore=2026-01-05T00:00:00Z&before=${id(2)}&limit=2&sort=-id`);
    expect(dated.json()).toMatchObject({ data: [{ id: id(3) }], hasMore: true, nextCursor: id(3), prevCursor: null });
  });

  it('before with after, beforeKey without before, before with page: 422', async () => {
    expect422(
      await get(`/posts?before=${id(2)}&after=${id(1)}`),
      { before: ['cannot be combined with after'] },
      'use after (the next page) or before (the previous page), not both',
    );
    expect422(await get('/posts?sort=title&beforeKey=a'), { beforeKey: ['needs before'] });
    expect422(await get(`/posts?sort=id&before=${id(1)}&beforeKey=a`), {
      beforeKey: ['applies only to sorts other than id'],
    });
    expect422(await get(`/posts?sort=createdAt&before=${id(1)}&beforeKey=yesterday`), {
      beforeKey: ['must be a UTC timestamp such as 2026-11-22T10:00:00.123456Z'],
    });
    expect422(
      await get(`/posts?page=2&before=${id(1)}`),
      { before: ['cannot be combined with page, perPage or snapshot'] },
      'use either page/perPage (offset mode) or after/limit (cursor mode)',
    );
    expect422(await get('/posts?before=999999999'), { before: ['does not name an item of this list'] });
    expect422(await get(`/users/${ann.user.id}/posts?before=${id(1)}`), {
      before: ['does not name an item of this list'],
    });
  });
});

describe('totals of filtered lists are exact up to 10 000, then estimated', () => {
  /** Past the threshold: at least 10 001, and the planner's row count (analyzed: close to the truth). */
  const estimated = (
    res: { json(): { total: number; totalPages: number; totalEstimated: boolean } },
    perPage: number,
  ) => {
    const { total, totalPages, totalEstimated } = res.json();
    expect(totalEstimated).toBe(true);
    expect(total).toBeGreaterThanOrEqual(10_001);
    expect(total).toBeLessThan(10_500);
    expect(totalPages).toBe(Math.ceil(total / perPage));
  };

  it('totalEstimated says the total is the estimate; cursor mode pages through all of them', async () => {
    await bulkPosts('Needle', 'haystack', '2030-01-01T00:00:00Z', 10_001);
    await t.app.db.query('ANALYZE posts');
    const searched = await get('/posts?q=needle&perPage=100&fields=title');
    estimated(searched, 100);
    expect(link(searched.headers.link, 'last')).toContain(`page=${searched.json().totalPages}`);
    estimated(await get('/posts?createdAfter=2029-12-31T00:00:00Z&fields=id&perPage=1'), 1);
    const exact = await get('/posts?q=needle%20-10001&fields=id&perPage=1');
    expect(exact.json()).toMatchObject({ total: 10_000, totalEstimated: false });
    const tail = await get('/posts?q=needle&sort=-id&limit=1&fields=title');
    expect(tail.json().data).toEqual([expect.objectContaining({ title: 'Needle 10001' })]);
  });
});

/**
 * Search pages against a brute force: the list's items in sort order and the
 * set of matches, each read with one plain statement, give every page. The
 * 10 009 posts above plus 3 000 here make words of every frequency: `haystack`
 * (10 001 matches: an estimated total), `common` (4 in 5 of these), `rare` (4
 * posts), and `edge`, placed around the cursor walk's end (WALK_LIMIT items
 * after the last needle) so that the walk fills the page exactly at its last
 * item, or falls one match short there.
 */
describe('search pages equal a brute-force reading, whatever the plan', () => {
  const SORTS = ['id', '-id', 'createdAt', '-createdAt', 'updatedAt', '-updatedAt', 'title', '-title'] as const;
  const COLUMN = { id: 'id', createdAt: 'created_at', updatedAt: 'updated_at', title: 'title' } as const;
  let g0 = 0; // the id before the first of the 3 000 (the last needle)
  const g = (n: number) => g0 + n;
  const EDGE = [1, 2, 3, 4, 5, 6, 7, WALK_LIMIT, WALK_LIMIT + 500];

  beforeAll(async () => {
    const { rows } = await t.app.db.query<{ id: number }>(
      `INSERT INTO posts (author_id, title, body, created_at, updated_at)
       SELECT CASE WHEN g % 2 = 0 THEN $1::int8 ELSE $2::int8 END,
         'Sample ' || lpad(((g * 7919) % 1500)::text, 4, '0'),
         concat_ws(' ', CASE WHEN g % 5 <> 0 THEN 'common' END, CASE WHEN g % 701 = 0 THEN 'rare' END,
           CASE WHEN g = ANY ($3::int[]) THEN 'edge' END, 'filler'),
         '2031-01-01T00:00:00Z'::timestamptz + ((g * 37) % 1000) * interval '1 second',
         '2032-01-01T00:00:00Z'::timestamptz + ((g * 101) % 2999) * interval '1 second'
       FROM generate_series(1, 3000) g RETURNING id`,
      [ann.user.id, bob.user.id, EDGE],
    );
    g0 = rows[0]!.id - 1;
    expect(rows.map((r) => r.id)).toEqual(rows.map((_, i) => g(i + 1)));
    await t.app.db.query('ANALYZE posts');
  });

  /** The list's ids in `sort` order and which of them match `q` (and the extra condition). */
  async function brute(q: string, sort: string, extra = 'TRUE', params: unknown[] = []) {
    const descending = sort.startsWith('-');
    const column = COLUMN[sort.replace('-', '') as keyof typeof COLUMN];
    const dir = descending ? 'DESC' : 'ASC';
    const { rows } = await t.app.db.query<{ id: number; hit: boolean }>(
      `SELECT id, search @@ websearch_to_tsquery('posts_search', $1) AND ${extra} AS hit FROM posts
       ORDER BY ${column} ${dir}, id ${dir}`,
      [q, ...params],
    );
    return { order: rows.map((r) => r.id), hits: rows.filter((r) => r.hit).map((r) => r.id) };
  }

  const page = async (url: string) => {
    const res = await get(url);
    expect(res.statusCode, res.body).toBe(200);
    return res;
  };

  it.each(SORTS)('sort=%s: cursor pages after and before any anchor', async (sort) => {
    for (const word of ['edge', 'rare', 'common', 'haystack']) {
      const { order, hits } = await brute(word, sort);
      const matched = new Set(hits);
      const anchors = [
        g(0),
        g(1),
        g(7),
        g(WALK_LIMIT - 1),
        g(WALK_LIMIT),
        g(1000),
        g(3000 - WALK_LIMIT),
        g(3000 - WALK_LIMIT + 1),
        g(3000),
      ];
      for (const anchor of anchors) {
        const at = order.indexOf(anchor);
        const following = order.slice(at + 1).filter((id) => matched.has(id));
        const preceding = order.slice(0, at).filter((id) => matched.has(id));
        for (const limit of word === 'edge' ? [6, 7, 8, 20] : [20]) {
          const after = (await page(`/posts?q=${word}&sort=${sort}&limit=${limit}&after=${anchor}&fields=id`)).json();
          expect(
            after.data.map((p: { id: number }) => p.id),
            `${word} after ${anchor} limit ${limit}`,
          ).toEqual(following.slice(0, limit));
          expect(after.hasMore).toBe(following.length > limit);
          const before = (await page(`/posts?q=${word}&sort=${sort}&limit=${limit}&before=${anchor}&fields=id`)).json();
          expect(
            before.data.map((p: { id: number }) => p.id),
            `${word} before ${anchor} limit ${limit}`,
          ).toEqual(preceding.slice(Math.max(0, preceding.length - limit)));
          expect(before.prevCursor !== null).toBe(preceding.length > limit);
        }
      }
    }
  });

  it.each(SORTS)('sort=%s: walking next links, then prev links back, gives every match once', async (sort) => {
    for (const [word, limit] of [
      ['edge', 3],
      ['rare', 2],
      ['common', 100],
    ] as const) {
      const { hits } = await brute(word, sort);
      const forward: number[] = [];
      let last = await page(`/posts?q=${word}&sort=${sort}&limit=${limit}&fields=id`);
      for (;;) {
        forward.push(...last.json().data.map((p: { id: number }) => p.id));
        const next = link(last.headers.link, 'next');
        if (next === undefined) break;
        last = await page(next);
      }
      expect(forward, word).toEqual(hits);
      const backward: number[] = [];
      let prev = link(last.headers.link, 'prev');
      while (prev !== undefined) {
        const res = await page(prev);
        backward.unshift(...res.json().data.map((p: { id: number }) => p.id));
        prev = link(res.headers.link, 'prev');
      }
      const lastPage = last.json().data.length;
      expect(backward, word).toEqual(hits.slice(0, hits.length - lastPage));
    }
  });

  it.each(SORTS)('sort=%s: offset pages and totals, exact or estimated', async (sort) => {
    for (const word of ['edge', 'rare', 'common', 'haystack', 'common -filler']) {
      const { hits } = await brute(word, sort);
      const total = Math.min(hits.length, 10_000);
      const pages = Math.ceil(total / 100);
      for (const n of new Set([1, 2, pages - 1, pages].filter((p) => p >= 1))) {
        const res = (
          await page(`/posts?q=${encodeURIComponent(word)}&sort=${sort}&perPage=100&page=${n}&fields=id`)
        ).json();
        expect(
          res.data.map((p: { id: number }) => p.id),
          `${word} page ${n}`,
        ).toEqual(hits.slice((n - 1) * 100, n * 100));
        if (hits.length > 10_000) expect(res).toMatchObject({ total: expect.any(Number), totalEstimated: true });
        else expect(res).toMatchObject({ total, totalEstimated: false });
      }
    }
  });

  it('with the author, in /users/{id}/posts, and with a date range', async () => {
    for (const sort of ['id', '-title', 'createdAt']) {
      for (const word of ['rare', 'common', 'edge']) {
        const own = await brute(word, sort, 'author_id = $2', [ann.user.id]);
        expect(await ids(`/users/${ann.user.id}/posts?q=${word}&sort=${sort}&perPage=100`)).toEqual(
          own.hits.slice(0, 100),
        );
        expect(await ids(`/posts?author=${ann.user.id}&q=${word}&sort=${sort}&limit=5&after=${g(2)}`)).toEqual(
          own.order
            .slice(own.order.indexOf(g(2)) + 1)
            .filter((id) => own.hits.includes(id))
            .slice(0, 5),
        );
        const from = '2031-01-01T00:08:20Z';
        const dated = await brute(word, sort, `created_at > $2::timestamptz`, [from]);
        expect(await ids(`/posts?q=${word}&sort=${sort}&createdAfter=${from}&perPage=100`)).toEqual(
          dated.hits.slice(0, 100),
        );
        expect(await ids(`/posts?q=${word}&sort=${sort}&createdAfter=${from}&limit=7&after=${g(WALK_LIMIT)}`)).toEqual(
          dated.order
            .slice(dated.order.indexOf(g(WALK_LIMIT)) + 1)
            .filter((id) => dated.hits.includes(id))
            .slice(0, 7),
        );
      }
    }
  });
});

interface Node {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: Node[];
}
/** The plan, as run (EXPLAIN ANALYZE), of the last statement `read` sent (the app's memory of common words). */
const planOf = async (read: (posts: ReturnType<typeof postsRepository>) => Promise<unknown>): Promise<Node> => {
  const sent: Statement[] = [];
  await read(
    postsRepository(
      {
        query: (statement: Statement) => (sent.push(statement), t.app.db.query(statement)),
      } as unknown as Queryable,
      t.app.db,
    ),
  );
  const { text, values } = sent.at(-1)!;
  const { rows } = await t.app.db.query({ text: `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values });
  return (rows[0] as { 'QUERY PLAN': [{ Plan: Node }] })['QUERY PLAN'][0].Plan;
};
const nodes = (node: Node): Node[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
const read = (node: Node) => (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'];
/** The most index entries one index scan of the plan read. */
const longestIndexWalk = async (reading: Parameters<typeof planOf>[0]) =>
  Math.max(
    0,
    ...nodes(await planOf(reading))
      .filter((node) => node['Node Type'].startsWith('Index'))
      .map(read),
  );

describe('a rare word is read from its matches, not by walking the sort index', () => {
  // The 13 009 posts above, analyzed: `rare` is in 4 of them, outside the
  // column's most common words, so the planner guesses it in dozens of posts
  // and, left to itself, walks the sort index past every post for a page of
  // them. On a table this small, reading the matches may well be a sequential
  // scan (all of it, as cheap as the few pages it is): what must not happen is
  // an index walk longer than the cursor page's bounded one.
  beforeAll(async () => {
    await t.app.db.query('ALTER TABLE posts ALTER COLUMN search SET STATISTICS 1');
    await t.app.db.query('ANALYZE posts');
  });

  it.each(['id', 'createdAt', 'title'] as const)(
    'sort=%s: no index walk past WALK_LIMIT posts, in either mode',
    async (field) => {
      const sort = { field, descending: field !== 'title' };
      expect(
        await longestIndexWalk((posts) => posts.list({ q: 'rare' }, sort, { kind: 'offset', page: 1, perPage: 20 })),
      ).toBeLessThanOrEqual(WALK_LIMIT);
      const cursor = { kind: 'cursor', after: undefined, afterKey: undefined, limit: 20 } as const;
      expect(await longestIndexWalk((posts) => posts.list({ q: 'rare' }, sort, cursor))).toBeLessThanOrEqual(
        WALK_LIMIT,
      );
    },
  );

  // The plan above is the only one a search gets: the planner never sees the
  // word, so after a few runs a connection keeps it as the statement's generic
  // plan and plans it no more (it was planned on every request, two thirds of
  // a rare word's database time). With a date range, or for a word found past
  // the cap, it is still planned each time.
  it('a search statement is prepared once per connection and runs its generic plan; a word past the cap is shown to the planner', async () => {
    // A connection of its own: the app's have run other searches already. On the server itself: behind
    // PgBouncer 1.18 (the scale topology) named statements do not stay on one server connection.
    const pool = createPool(onTopology(t.db.url).databaseListenUrl ?? t.db.url, 1);
    const client = await pool.connect();
    try {
      const posts = postsRepository(client);
      const sort = { field: 'id', descending: true } as const;
      const first = { kind: 'offset', page: 1, perPage: 20 } as const;
      const cursor = { kind: 'cursor', after: undefined, afterKey: undefined, limit: 20 } as const;
      for (let round = 0; round < 4; round++) {
        for (const q of ['rare', 'needle', 'recipe', 'nothing-like-it']) {
          // The offset page first: its count is what finds `needle` past the cap.
          await posts.list({ q }, sort, first);
          await posts.list({ q }, sort, cursor);
          await posts.list({ q, createdAfter: '2026-01-01T00:00:00Z' }, sort, first);
        }
      }
      const { rows } = await client.query<{ statement: string; generic_plans: string; custom_plans: string }>(
        `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%websearch_to_tsquery%'`,
      );
      // 12 offset and 12 cursor pages of the three words under the cap, each statement planned with
      // its values five times at most; of `needle` (10 001 matches), only the first count: once a
      // word is known past the cap, it is shown to the planner and its statements are planned each time.
      const plans = rows.map((row) => ({ generic: Number(row.generic_plans), custom: Number(row.custom_plans) }));
      expect(plans.reduce((sum, p) => sum + p.generic + p.custom, 0)).toBe(25);
      expect(plans.every((p) => p.custom <= 5 && (p.generic === 0 || p.custom === 5))).toBe(true);
      expect(plans.reduce((sum, p) => sum + p.generic, 0)).toBeGreaterThanOrEqual(25 - 3 * 5);
      // The ones with a date range were planned with their values: never prepared.
      expect(rows.every((row) => !row.statement.includes('date_trunc'))).toBe(true);
    } finally {
      client.release();
      await pool.end();
    }
  });
});

/** Sorted by id, a range's page is planned with the range's values (the planner weighs both indexes). */
describe('a date range in id order', () => {
  const NEEDLES = { createdAfter: '2029-12-31T00:00:00Z', createdBefore: '2030-06-01T00:00:00Z' };
  const url = `/posts?createdAfter=${NEEDLES.createdAfter}&createdBefore=${NEEDLES.createdBefore}&fields=id`;

  it('a post moved into the range, with an id below the others, is listed first; an empty range lists nothing', async () => {
    const [needle1, needle2] = await ids(`${url}&perPage=2`);
    const moved = id(0);
    const { rows } = await t.app.db.query<{ at: string }>('SELECT created_at AS at FROM posts WHERE id = $1', [moved]);
    await t.app.db.query(`UPDATE posts SET created_at = '2030-01-01T00:30:00Z' WHERE id = $1`, [moved]);
    try {
      expect(await ids(`${url}&perPage=3`)).toEqual([moved, needle1, needle2]);
      expect(await ids(`${url}&limit=3`)).toEqual([moved, needle1, needle2]);
    } finally {
      await t.app.db.query('UPDATE posts SET created_at = $2 WHERE id = $1', [moved, rows[0]!.at]);
    }
    expect(await ids(`${url}&perPage=2`)).toEqual([needle1, needle2]);
    const empty = await get('/posts?createdAfter=2040-01-01T00:00:00Z&fields=id');
    expect(empty.json()).toMatchObject({ data: [], total: 0 });
  });
});

describe('offset pages start from the ranks only past RANKED_FROM_OFFSET', () => {
  // At page 20 of an author the ranks cost 3.3 times the walk of its 380 items (bench/RESULTS.md, issue 47).
  it('a shallow page walks its offset; a deeper one asks post_page_start where it starts', async () => {
    const sentFor = async (page: number) => {
      const sent: Statement[] = [];
      const db = { query: (statement: Statement) => (sent.push(statement), t.app.db.query(statement)) };
      const posts = postsRepository(db as unknown as Queryable, t.app.db);
      await posts.listOfUser(
        ann.user.id,
        {},
        { field: 'id', descending: false },
        { kind: 'offset', page, perPage: 20 },
      );
      return sent.map((statement) => statement.text).join('\n');
    };
    expect(await sentFor(20)).not.toContain('post_page_start');
    expect(await sentFor(RANKED_FROM_OFFSET / 20 + 1)).toContain('post_page_start');
  });
});

/**
 * A word in 12 000 posts: once a page has counted it past the threshold, its pages ask the planner first and,
 * while the estimate is past the threshold too, take it as the total without counting (docs/api.md §10).
 */
describe('a common word is counted once, then estimated', () => {
  const sort = { field: 'id', descending: true } as const;
  const first = { kind: 'offset', page: 1, perPage: 20 } as const;
  const chaff = async () =>
    (await t.app.db.query<{ id: number }>(`SELECT id FROM posts WHERE body = 'chaff' ORDER BY id`)).rows.map((row) =>
      Number(row.id),
    );
  const plannerRows = async () => {
    const { rows } = await t.app.db.query<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
      `EXPLAIN (FORMAT JSON) SELECT 1 FROM posts WHERE search @@ websearch_to_tsquery('posts_search', 'chaff')`,
    );
    return Math.round(rows[0]!['QUERY PLAN'][0].Plan['Plan Rows']);
  };

  beforeAll(async () => {
    await bulkPosts('Chaff', 'chaff', '2001-01-01T00:00:00Z', 12_000);
    // The statistics of a table this size in full (an earlier test narrowed them).
    await t.app.db.query('ALTER TABLE posts ALTER COLUMN search SET STATISTICS -1');
    await t.app.db.query('ANALYZE posts');
  });

  it('its later pages read a page of matches, not every match, and show the estimate', async () => {
    const counted = await postsRepository(t.app.db).list({ q: 'chaff' }, sort, first);
    expect(counted).toMatchObject({ estimated: true });
    // Counting read every match up to the threshold's; the page alone reads a few more than its 20.
    const plan = await planOf((posts) => posts.list({ q: 'chaff' }, sort, first));
    const scans = nodes(plan).filter((node) => /Scan/.test(node['Node Type']));
    expect(scans.reduce((sum, node) => sum + read(node), 0)).toBeLessThan(1_000);

    const estimate = await plannerRows();
    expect(estimate).toBeGreaterThan(10_000);
    const res = await get('/posts?q=chaff&fields=id');
    expect(res.json()).toEqual({
      data: (await chaff()).slice(0, 20).map((id) => ({ id })),
      page: 1,
      perPage: 20,
      total: estimate,
      totalPages: Math.ceil(estimate / 20),
      totalEstimated: true,
    });
  });

  it('is counted exactly again once the planner expects no more than 10 000', async () => {
    await t.app.db.query(`DELETE FROM posts WHERE body = 'chaff' AND id % 4 = 0`);
    await t.app.db.query('ANALYZE posts');
    expect(await plannerRows()).toBeLessThanOrEqual(10_000);
    const left = await chaff();
    const res = await get('/posts?q=chaff&fields=id&perPage=100&page=2');
    expect(res.json()).toEqual({
      data: left.slice(100, 200).map((id) => ({ id })),
      page: 2,
      perPage: 100,
      total: left.length,
      totalPages: Math.ceil(left.length / 100),
      totalEstimated: false,
    });
  });
});

/** Last, as it deletes needles: one fewer than the threshold's worth of matches is counted exactly again. */
describe('a total falls back under the threshold', () => {
  it('is exact again once no more than 10 000 match', async () => {
    const range = '/posts?createdAfter=2029-12-31T00:00:00Z&createdBefore=2030-06-01T00:00:00Z&perPage=7&fields=id';
    expect((await get(range)).json()).toMatchObject({ totalEstimated: true });
    const { rows } = await t.app.db.query<{ id: number }>(`SELECT id FROM posts WHERE title = 'Needle 7'`);
    const deleted = await t.app.inject({ method: 'DELETE', url: `/posts/${rows[0]!.id}`, headers: ann.auth });
    expect(deleted.statusCode).toBe(204);
    expect((await get(range)).json()).toMatchObject({ total: 10_000, totalPages: 1_429, totalEstimated: false });
  });
});
