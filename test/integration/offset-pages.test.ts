/**
 * Offset pages without their two known flaws (docs/api.md §5):
 * - a page at any depth is the one `ORDER BY … OFFSET (page-1)*perPage LIMIT perPage` gives at that moment, for
 *   every sort, both directions, with and without an author, near the first page, deep and at the last page,
 *   whatever ids and creation times the posts have (the ranks that find a deep page are kept by triggers: a
 *   property test on random inserts, deletes and moves made with SQL, which may set any id or time);
 * - a walk of `next` links with the snapshot a first page hands out neither repeats nor skips while others create
 *   and delete posts, where the same walk without it does both;
 * - what the snapshot leaves out: items created since, and one whose transaction was still running when it was
 *   made; 422 for a token that is malformed or taken from another list, 410 for one older than an hour.
 */
import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { RANKED_FROM_OFFSET } from '../../src/db/pagination/common.js';
import { createComment, createPost, useTestApp } from '../helpers/factories.js';
import { expectError, expect422 } from '../helpers/expect.js';

// This file's lists are small, and the ranks are what it tests: they find every page past the first one here.
vi.mock(import('../../src/db/pagination/common.js'), async (importOriginal) => ({
  ...(await importOriginal()),
  RANKED_FROM_OFFSET: 1,
}));

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });

const get = (url: string) => t.app.inject({ method: 'GET', url });
const link = (header: unknown, rel: string) => new RegExp(`<([^>]+)>; rel="${rel}"`).exec(String(header ?? ''))?.[1];
const idsOf = (body: { data: { id: number }[] }) => body.data.map((item) => item.id);

const SORTS = { id: 'id', createdAt: 'created_at', updatedAt: 'updated_at', title: 'title' } as const;
type Field = keyof typeof SORTS;

/** What the page must hold: the same question asked of PostgreSQL directly, at that moment. */
async function expected(field: Field, descending: boolean, author: number | undefined, offset: number, size: number) {
  const dir = descending ? 'DESC' : 'ASC';
  const order = field === 'id' ? `id ${dir}` : `${SORTS[field]} ${dir}, id ${dir}`;
  const { rows } = await t.app.db.query<{ id: string }>(
    `SELECT id FROM posts WHERE $1::int8 IS NULL OR author_id = $1 ORDER BY ${order} OFFSET $2 LIMIT $3`,
    [author ?? null, offset, size],
  );
  return rows.map((row) => Number(row.id));
}

async function total(author: number | undefined): Promise<number> {
  const { rows } = await t.app.db.query<{ n: string }>(
    'SELECT count(*) AS n FROM posts WHERE $1::int8 IS NULL OR author_id = $1',
    [author ?? null],
  );
  return Number(rows[0]!.n);
}

/** Posts made with SQL: any id (the ranks count ranges of 4 096 ids), any creation time, ties included. */
const Insert = fc.record({
  kind: fc.constant('insert' as const),
  rows: fc.array(
    fc.record({
      id: fc.integer({ min: 1, max: 60_000 }),
      bob: fc.boolean(),
      // A few distinct times often, so that equal times span ranges; else anywhere in a year.
      at: fc.oneof(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 31_536_000 })),
    }),
    { minLength: 1, maxLength: 40 },
  ),
});
const Delete = fc.record({ kind: fc.constant('delete' as const), share: fc.double({ min: 0, max: 0.4, noNaN: true }) });
/** What only SQL does: a post given another author or creation time moves between ranks. */
const Move = fc.record({ kind: fc.constant('move' as const), share: fc.double({ min: 0, max: 0.2, noNaN: true }) });

type Op =
  { kind: 'insert'; rows: { id: number; bob: boolean; at: number }[] } | { kind: 'delete' | 'move'; share: number };

async function apply(op: Op): Promise<void> {
  const db = t.app.db;
  if (op.kind === 'insert') {
    for (const row of op.rows) {
      await db.query(
        `INSERT INTO posts (id, author_id, title, body, created_at, updated_at) OVERRIDING SYSTEM VALUE
         VALUES ($1::int8, $2, 'title ' || ($1::int8 % 7), 'body', '2026-01-01'::timestamptz + make_interval(secs => $3),
           '2026-06-01'::timestamptz - make_interval(secs => $3)) ON CONFLICT (id) DO NOTHING`,
        [row.id, row.bob ? bob.user.id : ann.user.id, row.at],
      );
    }
  } else if (op.kind === 'delete') {
    await db.query('DELETE FROM posts WHERE random() < $1', [op.share]);
  } else {
    await db.query(
      `UPDATE posts SET created_at = created_at - make_interval(secs => (random() * 1e6)::int),
         author_id = CASE WHEN random() < 0.5 THEN $2::int8 ELSE $3::int8 END WHERE random() < $1`,
      [op.share, ann.user.id, bob.user.id],
    );
  }
}

describe('a page at any depth is the page OFFSET gives', () => {
  it('for every sort and direction, with and without an author, first, deep and last pages', async () => {
    expect(RANKED_FROM_OFFSET).toBe(1);
    await fc.assert(
      fc.asyncProperty(
        fc.array<Op>(fc.oneof(Insert, Insert, Delete, Move), { minLength: 1, maxLength: 4 }),
        fc.constantFrom<Field>('id', 'createdAt', 'updatedAt', 'title'),
        fc.boolean(),
        fc.constantFrom<'all' | 'ann' | 'bob' | 'users'>('all', 'ann', 'bob', 'users'),
        fc.integer({ min: 1, max: 30 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (ops, field, descending, list, perPage, depth) => {
          for (const op of ops) await apply(op);
          const author = { all: undefined, ann: ann.user.id, bob: bob.user.id, users: bob.user.id }[list];
          const path =
            list === 'users' ? `/users/${bob.user.id}/posts?` : `/posts?${author ? `author=${author}&` : ''}`;
          const sort = `${descending ? '-' : ''}${field}`;
          const pages = Math.max(1, Math.ceil((await total(author)) / perPage));
          for (const page of new Set([1, 2, 1 + Math.floor(depth * pages), pages, pages + 1])) {
            const res = await get(`${path}sort=${sort}&perPage=${perPage}&page=${page}`);
            expect(res.statusCode, res.body).toBe(200);
            const want = await expected(field, descending, author, (page - 1) * perPage, perPage);
            expect(idsOf(res.json()), `${path}sort=${sort}&perPage=${perPage}&page=${page}`).toEqual(want);
          }
        },
      ),
      { numRuns: 40 },
    );
  });
});

/** The ids of every page of a list, by its next links from `first`; `between` runs after each page. */
async function walk(first: string, between: (shown: number[]) => Promise<void>, snapshot: boolean) {
  const pages: number[][] = [];
  let url: string | undefined = first;
  while (url !== undefined) {
    const res = await get(snapshot ? url : url.replace(/&snapshot=[\w-]+/, ''));
    expect(res.statusCode, res.body).toBe(200);
    pages.push(idsOf(res.json()));
    url = link(res.headers.link, 'next');
    await between(pages.flat());
  }
  return pages;
}

describe('a walk of next links with the snapshot', () => {
  it('neither repeats nor skips while others create and delete; without it, it does both', async () => {
    await t.app.db.query('DELETE FROM posts');
    for (let i = 0; i < 60; i++) await createPost(t.app, i % 2 ? ann : bob, { title: `walked ${i}` });
    const perPage = 7;
    for (const sort of ['-id', 'id', '-createdAt', 'createdAt']) {
      for (const snapshot of [true, false]) {
        const field = sort.replace('-', '') as Field;
        const before = await expected(field, sort.startsWith('-'), undefined, 0, 10_000);
        const deleted = new Set<number>();
        const remove = async (id: number | undefined) => {
          if (id === undefined) return;
          deleted.add(id);
          await t.app.db.query('DELETE FROM posts WHERE id = $1', [id]);
        };
        // Others, at a fixed rate, after each page: two new posts; one post already shown deleted (without the
        // snapshot, every later item moves up a place) and one not yet shown (with it, its page has a hole).
        const others = async (shown: number[]) => {
          await createPost(t.app, ann, { title: 'newer' });
          await createPost(t.app, bob, { title: 'newer' });
          await remove(shown.find((id) => !deleted.has(id)));
          await remove(before.findLast((id) => !deleted.has(id) && !shown.includes(id)));
        };
        const pages = await walk(`/posts?sort=${sort}&perPage=${perPage}`, others, snapshot);
        const returned = pages.flat();
        const repeated = returned.filter((id, i) => returned.indexOf(id) !== i);
        const skipped = before.filter((id) => !returned.includes(id) && !deleted.has(id));
        const newer = returned.filter((id) => !before.includes(id));
        if (snapshot) {
          expect({ sort, repeated, skipped, newer }).toEqual({ sort, repeated: [], skipped: [], newer: [] });
          // Each item on its page of the first moment: the ones deleted since left holes, nothing moved.
          pages.forEach((ids, page) =>
            ids.forEach((id) => expect(Math.floor(before.indexOf(id) / perPage), `${sort}: ${id}`).toBe(page)),
          );
          expect(returned).toEqual(before.filter((id) => returned.includes(id)));
        } else {
          expect(repeated.length + skipped.length, `${sort} without the snapshot`).toBeGreaterThan(0);
        }
      }
    }
  });
});

async function waitFor(done: () => Promise<boolean>): Promise<void> {
  while (!(await done())) await new Promise((resolve) => setTimeout(resolve, 5));
}
const waitUntilSleeping = (pid: number) =>
  waitFor(async () => {
    const { rows } = await t.app.db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = $2', [
      pid,
      'PgSleep',
    ]);
    return rows.length > 0;
  });
async function waitingOnALock(): Promise<boolean> {
  const { rows } = await t.app.db.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'`);
  return rows.length > 0;
}

describe('what a snapshot holds', () => {
  const page = async (url: string) => {
    const res = await get(url);
    expect(res.statusCode, res.body).toBe(200);
    return { body: res.json(), first: link(res.headers.link, 'first')! };
  };

  it('leaves out a transaction still running then, though its id is below the largest the snapshot saw', async () => {
    const [p1, p2] = [await createPost(t.app, ann), await createPost(t.app, ann)];
    // Comments of two posts are written side by side: the smaller id commits after the larger.
    const writer = new pg.Client({ connectionString: t.db.url });
    await writer.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`INSERT INTO comments (post_id, author_id, body) VALUES ($1, $2, 'in flight')`, [
        p1.id,
        ann.user.id,
      ]);
      await createComment(t.app, ann, p2.id, 'committed after it, with a larger id');
      const before = await page(`/posts/${p1.id}/comments`);
      expect(before.body.total).toBe(0);
      await writer.query('COMMIT');
      const after = await page(before.first);
      expect(after.body).toEqual({ data: [], page: 1, perPage: 20, total: 0, totalPages: 0 });
      expect((await page(`/posts/${p1.id}/comments`)).body.total).toBe(1);
    } finally {
      await writer.end();
    }
  });

  it('posts commit in the order of their ids: an insert that took a smaller id commits first', async () => {
    const writer = new pg.Client({ connectionString: t.db.url });
    await writer.connect();
    try {
      const { rows } = await writer.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      // Its first row takes its id, then the statement sleeps before its second (rows are made one at a time).
      const slow = writer.query(
        `INSERT INTO posts (author_id, title, body)
         SELECT $1, 'slow ' || i, concat('b', CASE WHEN i = 2 THEN pg_sleep(0.5) END) FROM generate_series(1, 2) i`,
        [ann.user.id],
      );
      await waitUntilSleeping(rows[0]!.pid);
      let committed = false;
      const later = createPost(t.app, bob, { title: 'after it' }).then(() => (committed = true));
      // It waits for the slow insert's commit: had it committed first, a snapshot would see its id without the
      // slow one's first, below it.
      await waitFor(async () => committed || (await waitingOnALock()));
      const before = await page('/posts?sort=-id&perPage=2');
      expect(committed).toBe(false);
      await slow;
      await later;
      expect((await page(before.first)).body).toEqual(before.body);
      const now = await page('/posts?sort=-id&perPage=2');
      expect(now.body.data.map((post: { title: string }) => post.title)).toEqual(['after it', 'slow 2']);
    } finally {
      await writer.end();
    }
  });

  it('keeps the place of a post whose id was used and deleted before (SQL may insert one)', async () => {
    await t.app.db.query('DELETE FROM posts');
    for (let i = 0; i < 6; i++) await createPost(t.app, ann);
    const { rows } = await t.app.db.query<{ id: string }>('SELECT min(id) AS id FROM posts');
    const reused = Number(rows[0]!.id);
    await t.app.db.query('DELETE FROM posts WHERE id = $1', [reused]);
    await t.app.db.query(
      `INSERT INTO posts (id, author_id, title, body) OVERRIDING SYSTEM VALUE VALUES ($1, $2, 'again', 'again')`,
      [reused, ann.user.id],
    );
    const first = await page('/posts?perPage=2');
    const second = link((await get(first.first)).headers.link, 'next')!;
    const then = await expected('id', false, undefined, 2, 2);
    await t.app.db.query('DELETE FROM posts WHERE id = $1', [(await expected('id', false, undefined, 0, 1))[0]]);
    expect((await page(second)).body.data.map((post: { id: number }) => post.id)).toEqual(then);
  });

  it('is a 422 when malformed or taken from another list, a 410 past an hour; its total is the snapshot’s', async () => {
    await createPost(t.app, bob);
    const { first } = await page('/posts?perPage=3');
    const token = new URL(first, 'http://x').searchParams.get('snapshot')!;
    await createPost(t.app, bob);
    const kept = await page(first);
    expect(kept.body.total).toBe((await total(undefined)) - 1);
    const refused = ['is not a snapshot this service handed out; use the one in a Link header'];
    for (const bad of [
      'x',
      'MTIz',
      token.slice(0, -4),
      Buffer.from('1.2.3.0.abcdefghijklmnop.9:5:').toString('base64url'),
    ])
      expect422(await get(`/posts?snapshot=${bad}`), { snapshot: refused });
    expect422(await get(`/posts?sort=-id&snapshot=${token}`), {
      snapshot: ['belongs to another list: keep the path, filters and sort of the page that handed it out'],
    });
    expect422(
      await get(`/posts?limit=3&snapshot=${token}`),
      {
        limit: ['cannot be combined with page, perPage or snapshot'],
      },
      'use either page/perPage (offset mode) or after/limit (cursor mode)',
    );
    const [madeAt, ...rest] = Buffer.from(token, 'base64url').toString().split('.');
    const old = Buffer.from([Number(madeAt) - 3_600_001, ...rest].join('.')).toString('base64url');
    expectError(
      await get(`/posts?perPage=3&page=2&snapshot=${old}`),
      410,
      'gone',
      'the snapshot is more than an hour old, longer than one is kept; start again at /posts?perPage=3',
    );
  });
});
