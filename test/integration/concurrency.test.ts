/**
 * Concurrency (issue 9): what the database must decide when requests race.
 * - sign-ups with one e-mail in different letter cases: exactly one wins, the
 *   rest are the contract's 409;
 * - comment creates, deletes and edits across several posts at once: every
 *   commentCount equals COUNT(*) afterwards;
 * - PATCHes of one post or comment at once: the final state is one of those
 *   submitted, and the version counts exactly the successful ones;
 * - cursor walks while items are inserted and deleted (the cursor's own item
 *   included): nothing present for the whole walk is skipped or repeated, and
 *   the walk never goes backwards.
 * Requests run truly in parallel against PostgreSQL (app.inject is async all
 * the way down); every response is also checked against the contract.
 */
import { describe, expect, it } from 'vitest';
import { createPost, signUp, useTestApp, type SignedUp } from '../helpers/factories.js';
import { MISCOUNTED_POSTS } from '../helpers/database.js';
import { expectContractResponse } from '../helpers/contract.js';
import { counter } from '../../src/db/pagination.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });
const cat = t.user({ name: 'Cat' });

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';
async function call(method: Method, url: string, who?: SignedUp, payload?: object) {
  const res = await t.app.inject({ method, url, headers: who?.auth ?? {}, ...(payload ? { payload } : {}) });
  expectContractResponse(res, { request: { method, url, payload } });
  return res;
}

const newPostId = async (who: SignedUp, title?: string) => (await createPost(t.app, who, { title })).id;

describe('sign-ups racing for one e-mail', () => {
  it('in different letter cases: exactly one 201, every other one the contract’s 409', async () => {
    const variants = [
      'race@example.com',
      'RACE@example.com',
      'Race@Example.com',
      'race@EXAMPLE.COM',
      'rAcE@example.com',
      'RACE@EXAMPLE.COM',
    ];
    const results = await Promise.all(
      variants.map((email, i) =>
        call('POST', '/users', undefined, { name: `Racer ${i}`, email, password: 'racing-1234' }),
      ),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409, 409, 409, 409, 409]);
    for (const res of results.filter((r) => r.statusCode === 409)) {
      expect(res.json()).toEqual({
        error: 'conflict',
        message: 'email is already registered',
        fieldErrors: { email: ['is already registered'] },
        requestId: res.headers['x-request-id'],
      });
    }
    const { rows } = await t.app.db.query(
      "SELECT count(*)::int AS n FROM users WHERE lower(email) = 'race@example.com'",
    );
    expect(rows[0].n).toBe(1);
  });
});

describe('commentCount under racing creates, deletes and edits', () => {
  it('equals COUNT(*) for every post afterwards', async () => {
    const posts = await Promise.all([newPostId(ann), newPostId(bob), newPostId(cat)]);
    const seed = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        call('POST', `/posts/${posts[i % 3]}/comments`, [ann, bob, cat][i % 3], { body: `seed ${i}` }),
      ),
    );
    const seeded = seed.map((r) => ({ postId: r.json().postId as number, id: r.json().id as number }));
    const writers = [ann, bob, cat];

    const results = await Promise.all([
      // 30 creates spread over the posts,
      ...Array.from({ length: 30 }, (_, i) =>
        call('POST', `/posts/${posts[i % 3]}/comments`, writers[(i + 1) % 3], { body: `burst ${i}` }),
      ),
      // every seeded comment deleted by its post's author (allowed), some of them twice,
      ...seeded.map((c) => call('DELETE', `/posts/${c.postId}/comments/${c.id}`, writers[posts.indexOf(c.postId)])),
      ...seeded
        .slice(0, 4)
        .map((c) => call('DELETE', `/posts/${c.postId}/comments/${c.id}`, writers[posts.indexOf(c.postId)])),
      // and edits of comments that may already be gone.
      ...seeded
        .slice(4, 8)
        .map((c) =>
          call('PATCH', `/posts/${c.postId}/comments/${c.id}`, writers[seeded.indexOf(c) % 3], { body: 'edited' }),
        ),
    ]);
    const statuses = results.map((r) => r.statusCode);
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(201));
    // Each seeded comment is deleted exactly once; the second attempt finds it gone.
    const deletes = statuses.slice(30, 46);
    expect(deletes.filter((s) => s === 204)).toHaveLength(12);
    expect(deletes.filter((s) => s === 404)).toHaveLength(4);
    for (const s of statuses.slice(46)) expect([200, 404]).toContain(s);

    for (const postId of posts) {
      const counted = await t.app.db.query('SELECT count(*)::int AS n FROM comments WHERE post_id = $1', [postId]);
      const post = (await call('GET', `/posts/${postId}`)).json();
      expect(post.commentCount).toBe(counted.rows[0].n);
      expect(post.commentCount).toBe(10);
      expect((await call('GET', `/posts/${postId}/comments?perPage=1`)).json().total).toBe(10);
    }
    const { rows } = await t.app.db.query(MISCOUNTED_POSTS);
    expect(rows[0].n).toBe(0);
  });
});

describe('post totals under racing creates and deletes by one author', () => {
  // One row per total, so concurrent creates by one author queue on its row
  // lock. Both totals must equal COUNT(*), on both create paths (one autocommit
  // statement, and the Idempotency-Key transaction).
  it('the author total, the author-filtered total and the global total equal COUNT(*) afterwards', async () => {
    const writer = await signUp(t.app, { name: 'Prolific' });
    const victims = await Promise.all(Array.from({ length: 10 }, () => newPostId(writer)));
    const results = await Promise.all([
      ...Array.from({ length: 30 }, (_, i) =>
        t.app.inject({
          method: 'POST',
          url: '/posts',
          headers: i % 3 ? writer.auth : { ...writer.auth, 'idempotency-key': `burst-${i}` },
          payload: { title: `burst ${i}`, body: 'b' },
        }),
      ),
      ...victims.map((id) => call('DELETE', `/posts/${id}`, writer)),
      ...Array.from({ length: 10 }, (_, i) =>
        call('POST', '/posts', [ann, bob][i % 2], { title: `other ${i}`, body: 'b' }),
      ),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([...Array(10).fill(204), ...Array(40).fill(201)].sort());

    const own = (await call('GET', `/users/${writer.user.id}/posts?perPage=1`)).json();
    const filtered = (await call('GET', `/posts?author=${writer.user.id}&perPage=1`)).json();
    const all = (await call('GET', '/posts?perPage=1')).json();
    const { rows } = await t.app.db.query(
      `SELECT (SELECT count(*) FROM posts WHERE author_id = $1)::int AS mine, (SELECT count(*) FROM posts)::int AS every`,
      [writer.user.id],
    );
    expect([own.total, filtered.total, all.total]).toEqual([30, 30, rows[0].every]);
    expect(rows[0].mine).toBe(30);
  });

  it('a missing total row (a restored database) reads as 0 and is created by the next write', async () => {
    const client = await t.app.db.connect();
    try {
      await client.query('BEGIN');
      await client.query(`DELETE FROM counters WHERE name IN ('posts', 'users')`);
      const totals = async () =>
        (await client.query(`SELECT (${counter('posts')})::int AS n, (${counter('users')})::int AS u`)).rows[0];
      const before = await totals();
      await client.query(`INSERT INTO posts (author_id, title, body) VALUES ($1, 'restored', 'b')`, [ann.user.id]);
      await client.query(`INSERT INTO users (email, name, password_hash) VALUES ('restored@example.com', 'R', 'x')`);
      const created = await totals();
      await client.query(`DELETE FROM posts WHERE title = 'restored'`);
      await client.query(`DELETE FROM users WHERE email = 'restored@example.com'`);
      expect([before, created, await totals()]).toEqual([
        { n: 0, u: 0 },
        { n: 1, u: 1 },
        { n: 0, u: 0 },
      ]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});

describe('racing PATCHes', () => {
  it('of one post: the final state is one of those submitted; version = 1 + successful PATCHes', async () => {
    const { id: postId } = await createPost(t.app, ann, { title: 'original title', body: 'original body' });
    const submitted = Array.from({ length: 16 }, (_, i) => ({ title: `title ${i}`, body: `body ${i}` }));
    const results = await Promise.all([
      ...submitted.map((payload) => call('PATCH', `/posts/${postId}`, ann, payload)),
      // Not allowed, or not valid: these must change nothing.
      ...submitted.slice(0, 4).map((payload) => call('PATCH', `/posts/${postId}`, bob, payload)),
      ...Array.from({ length: 4 }, () => call('PATCH', `/posts/${postId}`, ann, { title: ' ' })),
    ]);
    const statuses = results.map((r) => r.statusCode);
    expect(statuses).toEqual([...Array(16).fill(200), ...Array(4).fill(403), ...Array(4).fill(422)]);
    // Each success answered with a state that was one of the submitted ones, as a whole.
    for (const res of results.slice(0, 16))
      expect(submitted).toContainEqual({ title: res.json().title, body: res.json().body });

    const final = (await call('GET', `/posts/${postId}`)).json();
    expect(submitted).toContainEqual({ title: final.title, body: final.body });
    const { rows } = await t.app.db.query('SELECT version FROM posts WHERE id = $1', [postId]);
    expect(rows[0].version).toBe(1 + statuses.filter((s) => s === 200).length);
  });

  it('of one comment: the same', async () => {
    const postId = await newPostId(ann);
    const commentId = (await call('POST', `/posts/${postId}/comments`, bob, { body: 'first' })).json().id;
    const submitted = Array.from({ length: 12 }, (_, i) => `edit ${i}`);
    const results = await Promise.all([
      ...submitted.map((body) => call('PATCH', `/posts/${postId}/comments/${commentId}`, bob, { body })),
      call('PATCH', `/posts/${postId}/comments/${commentId}`, ann, { body: 'the post author may not' }),
    ]);
    expect(results.map((r) => r.statusCode)).toEqual([...Array(12).fill(200), 403]);
    const final = (await call('GET', `/posts/${postId}/comments/${commentId}`)).json();
    expect(submitted).toContain(final.body);
    const { rows } = await t.app.db.query('SELECT version FROM comments WHERE id = $1', [commentId]);
    expect(rows[0].version).toBe(13);
  });
});

describe('cursor walks while items are inserted and deleted', () => {
  interface Item {
    id: number;
    title?: string;
    createdAt: string;
  }
  const KEY: Record<string, (item: Item) => string | number> = {
    id: (item) => item.id,
    title: (item) => item.title!,
    createdAt: (item) => item.createdAt,
  };

  /**
   * Walks `url` (limit 4) following the Link header, while `writer` inserts and
   * deletes concurrently; every third page the walker deletes the item its
   * cursor names (as `owner`, who may delete any item of the list). Returns
   * what the walk saw and which items it deleted.
   */
  async function walkDuring(
    url: string,
    writer: () => Promise<void>,
    deleteUrl: (id: number) => string,
    owner: SignedUp,
  ) {
    const seen: Item[] = [];
    const deletedByWalker: number[] = [];
    let writing = true;
    const walker = (async () => {
      let next: string | undefined = url;
      for (let page = 1; next !== undefined; page++) {
        const res = await call('GET', next);
        expect(res.statusCode).toBe(200);
        const body = res.json() as { data: Item[]; hasMore: boolean; nextCursor: number | null };
        seen.push(...body.data);
        next = body.hasMore ? /<([^>]+)>; rel="next"/.exec(String(res.headers.link))?.[1] : undefined;
        if (page % 3 === 0 && body.nextCursor !== null) {
          // The cursor's own item goes away (unless the writer was first): the next page must still follow it.
          const status = (await call('DELETE', deleteUrl(body.nextCursor), owner)).statusCode;
          expect([204, 404]).toContain(status);
          if (status === 204) deletedByWalker.push(body.nextCursor);
        }
      }
      writing = false;
    })();
    const writes = (async () => {
      while (writing) await writer();
    })();
    await Promise.all([walker, writes]);
    return { seen, deletedByWalker };
  }

  function expectMonotonic(seen: Item[], sort: string) {
    const field = sort.replace(/^-/, '');
    const sign = sort.startsWith('-') ? -1 : 1;
    for (let i = 1; i < seen.length; i++) {
      const [before, after] = [KEY[field]!(seen[i - 1]!), KEY[field]!(seen[i]!)];
      const byKey = after > before ? 1 : after < before ? -1 : 0;
      // createdAt shows milliseconds of microsecond keys: equal strings may come in either id order.
      const cmp = byKey !== 0 || field === 'createdAt' ? byKey : seen[i]!.id > seen[i - 1]!.id ? 1 : -1;
      expect(cmp * sign, `${sort}: item ${i} goes backwards`).toBeGreaterThanOrEqual(field === 'createdAt' ? 0 : 1);
    }
  }

  it.each(['id', '-id', 'title', '-title', 'createdAt', '-createdAt'])('posts of one author, sort=%s', async (sort) => {
    const author = await signUp(t.app, { name: `Walker ${sort}` });
    const titles = ['alpha', 'bravo', 'charlie'];
    const initial: number[] = [];
    for (let i = 0; i < 36; i++) initial.push(await newPostId(author, titles[i % 3]!));
    // A third of them will be deleted by the writer while the walk runs.
    const doomed = initial.filter((_, i) => i % 3 === 1);
    const pending = [...doomed];
    const missed: number[] = [];
    let n = 0;
    const writer = async () => {
      n += 1;
      const victim = pending.shift();
      await Promise.all([
        newPostId(author, titles[n % 3]!),
        victim === undefined
          ? undefined
          : call('DELETE', `/posts/${victim}`, author).then((r) => {
              expect([204, 404]).toContain(r.statusCode);
              if (r.statusCode === 404) missed.push(victim);
            }),
      ]);
    };
    const { seen, deletedByWalker } = await walkDuring(
      `/users/${author.user.id}/posts?sort=${sort}&limit=4`,
      writer,
      (id) => `/posts/${id}`,
      author,
    );
    // The walker deletes the item its cursor names; when that was a doomed one, it may have come first.
    expect(
      missed.filter((id) => !deletedByWalker.includes(id)),
      'a delete found nothing to delete',
    ).toEqual([]);

    const ids = seen.map((item) => item.id);
    expect(new Set(ids).size, 'an item was repeated').toBe(ids.length);
    const gone = new Set([...doomed, ...deletedByWalker]);
    const survivors = initial.filter((id) => !gone.has(id));
    expect(
      survivors.filter((id) => !ids.includes(id)),
      'items present all along were skipped',
    ).toEqual([]);
    expectMonotonic(seen, sort);
  });

  it.each(['id', '-id', 'createdAt', '-createdAt'])('comments of one post, sort=%s', async (sort) => {
    const postId = await newPostId(ann);
    const initial: number[] = [];
    for (let i = 0; i < 30; i++)
      initial.push((await call('POST', `/posts/${postId}/comments`, bob, { body: `c${i}` })).json().id);
    const doomed = initial.filter((_, i) => i % 4 === 2);
    const pending = [...doomed];
    const writer = async () => {
      const victim = pending.shift();
      await Promise.all([
        call('POST', `/posts/${postId}/comments`, cat, { body: 'late' }),
        victim === undefined ? undefined : call('DELETE', `/posts/${postId}/comments/${victim}`, bob),
      ]);
    };
    const { seen, deletedByWalker } = await walkDuring(
      `/posts/${postId}/comments?sort=${sort}&limit=4`,
      writer,
      (id) => `/posts/${postId}/comments/${id}`,
      ann,
    );
    const ids = seen.map((item) => item.id);
    expect(new Set(ids).size, 'an item was repeated').toBe(ids.length);
    const gone = new Set([...doomed, ...deletedByWalker]);
    expect(
      initial.filter((id) => !gone.has(id) && !ids.includes(id)),
      'items present all along were skipped',
    ).toEqual([]);
    expectMonotonic(seen, sort);
  });
});
