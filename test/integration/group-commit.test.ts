/**
 * Group commit (src/db/batch.ts): concurrent creates share statements, each
 * request still gets its own row, one bad row fails only its own request and
 * leaves nothing of itself behind, and a row locked elsewhere holds back only
 * the write to it (the app under load: locked-row.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { batchedWrite } from '../../src/db/batch.js';
import { useTestApp, type SignedUp } from '../helpers/factories.js';
import { expect404, iso } from '../helpers/expect.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
const bob = t.user({ name: 'Bob' });

/** Counts the statements sent on the app's pool whose text includes `marker`, while `fn` runs. */
async function countingStatements<T>(marker: string, fn: () => Promise<T>): Promise<{ result: T; statements: number }> {
  const db = t.app.db as pg.Pool;
  const query = db.query;
  let statements = 0;
  db.query = function (this: pg.Pool, ...args: unknown[]) {
    const config = args[0] as { text?: string } | string;
    if ((typeof config === 'string' ? config : (config.text ?? '')).includes(marker)) statements++;
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof db.query;
  try {
    return { result: await fn(), statements };
  } finally {
    db.query = query;
  }
}

describe('concurrent creates', () => {
  it('posts: fewer INSERTs than requests, each answer its own post, every total exact', async () => {
    const total = async (url: string) => (await t.app.inject({ url })).json().total as number;
    const before = await total('/posts');
    const annBefore = await total(`/users/${ann.user.id}/posts`);
    const writers = Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? ann : bob));
    const { result: answers, statements } = await countingStatements('INSERT INTO posts', () =>
      Promise.all(
        writers.map((who, i) =>
          t.app.inject({
            method: 'POST',
            url: '/posts',
            headers: who.auth,
            payload: { title: `Post ${i}`, body: `body ${i}` },
          }),
        ),
      ),
    );
    expect(statements).toBeGreaterThan(0);
    expect(statements).toBeLessThan(16);
    for (const [i, res] of answers.entries()) {
      expect(res.statusCode).toBe(201);
      const post = res.json();
      expect(post).toEqual({
        id: expect.any(Number),
        title: `Post ${i}`,
        body: `body ${i}`,
        authorId: writers[i]!.user.id,
        commentCount: 0,
        createdAt: iso,
        updatedAt: iso,
      });
      expect(res.headers.location).toMatch(new RegExp(`/posts/${post.id}$`));
      expect(res.headers.etag).toBe(`"p${post.id}-1-0"`);
      expect((await t.app.inject({ url: `/posts/${post.id}` })).json()).toEqual(post);
    }
    expect(new Set(answers.map((res) => res.json().id)).size).toBe(16);
    expect(await total('/posts')).toBe(before + 16);
    expect(await total(`/users/${ann.user.id}/posts`)).toBe(annBefore + 8);
  });

  it('comments: a missing post is a 404 for its comments only; the others land on their posts, counted', async () => {
    const posts = await Promise.all(
      [1, 2, 3].map(async (i) =>
        (
          await t.app.inject({
            method: 'POST',
            url: '/posts',
            headers: ann.auth,
            payload: { title: `On ${i}`, body: 'x' },
          })
        ).json(),
      ),
    );
    // Deleted before the comments arrive: it is missing for the whole statement its comments share.
    const gone = posts[2].id as number;
    expect((await t.app.inject({ method: 'DELETE', url: `/posts/${gone}`, headers: ann.auth })).statusCode).toBe(204);
    const targets = Array.from({ length: 15 }, (_, i) => posts[i % 3].id as number);
    const { result: answers, statements } = await countingStatements('INSERT INTO comments', () =>
      Promise.all(
        targets.map((postId, i) =>
          t.app.inject({
            method: 'POST',
            url: `/posts/${postId}/comments`,
            headers: bob.auth,
            payload: { body: `comment ${i}` },
          }),
        ),
      ),
    );
    expect(statements).toBeLessThan(15);
    for (const [i, res] of answers.entries()) {
      const postId = targets[i]!;
      if (postId === gone) {
        expect404(res, `post ${gone} does not exist`);
        continue;
      }
      expect(res.statusCode).toBe(201);
      expect(res.json()).toEqual({
        id: expect.any(Number),
        postId,
        authorId: bob.user.id,
        body: `comment ${i}`,
        createdAt: iso,
        updatedAt: iso,
      });
    }
    for (const post of posts.slice(0, 2)) {
      const list = (await t.app.inject({ url: `/posts/${post.id}/comments?perPage=100` })).json();
      expect(list.total).toBe(5);
      expect((await t.app.inject({ url: `/posts/${post.id}` })).json().commentCount).toBe(5);
    }
  });
});

describe('concurrent changes', () => {
  const create = async (who: SignedUp, title: string) =>
    (
      await t.app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload: { title, body: 'b' } })
    ).json() as { id: number };
  const patch = (who: SignedUp, id: number, payload: object) =>
    t.app.inject({ method: 'PATCH', url: `/posts/${id}`, headers: who.auth, payload });

  it('of several posts share UPDATEs; a foreign post is a 403 and a missing one a 404, alone', async () => {
    const mine = await Promise.all(Array.from({ length: 10 }, (_, i) => create(ann, `Mine ${i}`)));
    const theirs = await create(bob, 'Theirs');
    const { result: answers, statements } = await countingStatements('UPDATE posts SET', () =>
      Promise.all([
        ...mine.map((post, i) => patch(ann, post.id, i % 2 === 0 ? { title: `New ${i}` } : { body: `new ${i}` })),
        patch(ann, theirs.id, { title: 'Stolen' }),
        patch(ann, 999_999, { title: 'Ghost' }),
      ]),
    );
    expect(statements).toBeLessThan(12);
    for (const [i, post] of mine.entries()) {
      const res = answers[i]!;
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        id: post.id,
        title: i % 2 === 0 ? `New ${i}` : `Mine ${i}`,
        body: i % 2 === 0 ? 'b' : `new ${i}`,
        authorId: ann.user.id,
        commentCount: 0,
        createdAt: iso,
        updatedAt: iso,
      });
      expect(res.headers.etag).toBe(`"p${post.id}-2-0"`);
    }
    expect(answers[10]!.statusCode).toBe(403);
    expect((await t.app.inject({ url: `/posts/${theirs.id}` })).json().title).toBe('Theirs');
    expect404(answers[11]!, 'post 999999 does not exist');
  });

  it('behind a post locked elsewhere wait for it, while changes of other posts go on', async () => {
    const locked = await create(ann, 'Locked');
    const free = await create(ann, 'Free');
    const locker = new pg.Client({ connectionString: t.db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [locked.id]);
      let waited = false;
      const waiting = patch(ann, locked.id, { title: 'After the lock' }).finally(() => (waited = true));
      await new Promise((resolve) => setTimeout(resolve, 20));
      const other = await patch(ann, free.id, { title: 'Meanwhile' });
      expect(other.statusCode).toBe(200);
      expect(other.json().title).toBe('Meanwhile');
      expect(waited).toBe(false);
      await locker.query('COMMIT');
      const res = await waiting;
      expect(res.statusCode).toBe(200);
      expect(res.json().title).toBe('After the lock');
    } finally {
      await locker.end();
    }
  });

  it('of one post never share a statement: each is written, each answer its own version', async () => {
    const { id } = await create(ann, 'Start');
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => patch(ann, id, { title: `Title ${i}` })));
    const versions = answers.map((res) => {
      expect(res.statusCode).toBe(200);
      return Number(/^"p\d+-(\d+)-0"$/.exec(res.headers.etag as string)![1]);
    });
    expect(versions.sort((a, b) => a - b)).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
    const last = answers.find((res) => res.headers.etag === `"p${id}-9-0"`)!;
    expect((await t.app.inject({ url: `/posts/${id}` })).json()).toEqual(last.json());
  });
});

describe('batchedWrite on a real table', () => {
  let pool: pg.Pool;
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: t.db.url, max: 4 });
    // A backend terminated below ends idle clients too (through PgBouncer: "server conn crashed?").
    pool.on('error', () => undefined);
    await pool.query(
      'CREATE TABLE batch_probe (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, n int NOT NULL CHECK (n >= 0), k int)',
    );
  });
  afterAll(() => pool.end());

  const batches: number[][] = [];
  const insert = batchedWrite<{ n: number; k?: number }, { id: number; n: number }>({
    key: (input) => input.k,
    async run(db, inputs) {
      batches.push(inputs.map((input) => input.n));
      const { rows } = await db.query<{ id: number; n: number }>(
        'INSERT INTO batch_probe (n) SELECT n FROM unnest($1::int[]) WITH ORDINALITY AS i(n, o) ORDER BY o RETURNING id, n',
        [inputs.map((input) => input.n)],
      );
      return rows.sort((a, b) => a.id - b.id);
    },
  });

  it('the first write goes out at once; those arriving meanwhile share the next statement', async () => {
    batches.length = 0;
    const rows = await Promise.all([1, 2, 3, 4, 5].map((n) => insert(pool, { n })));
    expect(rows.map((row) => row?.n)).toEqual([1, 2, 3, 4, 5]);
    expect(batches).toEqual([[1], [2, 3, 4, 5]]);
  });

  it('one bad row fails only its own write, and nothing of it is kept', async () => {
    await pool.query('TRUNCATE batch_probe');
    batches.length = 0;
    const outcomes = await Promise.allSettled([10, 11, -1, 12].map((n) => insert(pool, { n })));
    expect(outcomes.map((o) => (o.status === 'fulfilled' ? o.value?.n : (o.reason as { code: string }).code))).toEqual([
      10,
      11,
      '23514',
      12,
    ]);
    // The shared statement failed as a whole; its writes ran again alone.
    expect(batches).toEqual([[10], [11, -1, 12], [11], [-1], [12]]);
    expect((await pool.query('SELECT n FROM batch_probe ORDER BY n')).rows.map((row) => row.n)).toEqual([10, 11, 12]);
  });

  it('a connection lost under a shared statement fails all its writes, none run again (it may have committed)', async () => {
    const client = await pool.connect();
    const runs: number[][] = [];
    const lost = batchedWrite<number, number>({
      async run(db, inputs) {
        runs.push([...inputs]);
        if (inputs.length > 1) {
          // The statement commits; then its connection dies before the answer arrives.
          await db.query('INSERT INTO batch_probe (n) SELECT unnest($1::int[])', [inputs]);
          const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          await pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
          await db.query('SELECT 1');
        }
        return inputs;
      },
    });
    await pool.query('TRUNCATE batch_probe');
    client.on('error', () => undefined);
    const outcomes = await Promise.allSettled([30, 31, 32].map((n) => lost(client, n)));
    client.release(true);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect(runs).toEqual([[30], [31, 32]]);
    expect((await pool.query('SELECT n FROM batch_probe ORDER BY n')).rows.map((row) => row.n)).toEqual([31, 32]);
  });

  it('a row locked elsewhere: the shared statement skips it, its write runs again alone and waits; nothing else does', async () => {
    await pool.query('TRUNCATE batch_probe RESTART IDENTITY');
    await pool.query('INSERT INTO batch_probe (n) SELECT generate_series(1, 4)');
    const runs: string[] = [];
    const bump = batchedWrite<number, number>({
      async run(db, ids, wait) {
        runs.push(`${ids.join(',')}${wait ? ' waiting' : ''}`);
        const { rows } = await db.query<{ id: number }>(
          `UPDATE batch_probe SET n = n + 10
           WHERE id IN (SELECT id FROM batch_probe WHERE id = ANY($1::int[]) FOR UPDATE${wait ? '' : ' SKIP LOCKED'}) RETURNING id`,
          [ids],
        );
        return ids.map((id) => (rows.some((row) => row.id === id) ? id : undefined));
      },
    });
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM batch_probe WHERE id = 2 FOR UPDATE');
      let waited = false;
      const [one, two, three] = [1, 2, 3].map((id) => bump(pool, id));
      void two!.finally(() => (waited = true));
      expect(await Promise.all([one, three])).toEqual([1, 3]);
      // The next statement goes out at once: the lone waiting one does not hold back its kind.
      expect(await bump(pool, 4)).toBe(4);
      expect(waited).toBe(false);
      await locker.query('COMMIT');
      expect(await two).toBe(2);
    } finally {
      locker.release();
    }
    expect(runs).toEqual(['1', '2,3', '2 waiting', '4']);
    expect((await pool.query('SELECT n FROM batch_probe ORDER BY id')).rows.map((row) => row.n)).toEqual([
      11, 12, 13, 14,
    ]);
  });

  it('writes with the same key never share a statement', async () => {
    batches.length = 0;
    await Promise.all([20, 21, 22, 23].map((n) => insert(pool, { n, k: n % 2 })));
    expect(batches).toEqual([[20], [21, 22], [23]]);
  });
});
