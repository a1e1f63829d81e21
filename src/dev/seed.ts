/** Demo data for `npm run seed` and the benchmark: made in PostgreSQL in one transaction, triggers bypassed. */
import type pg from 'pg';
import { hashPassword } from '../security.js';
import {
  ADJECTIVES,
  COMMENT_TEXTS,
  CORPUS,
  FIRST_NAMES,
  INSERT_COMMENTS,
  INSERT_POSTS,
  INSERT_USERS,
  LAST_NAMES,
  NOUNS,
  POST_TEXTS,
  WORD_STARTS,
  YEAR_SECONDS,
  bind,
} from './seed-rows.js';
import { seedWebhook } from '../events/webhooks/repository.js';
import { DEMO_EMAIL, DEMO_ID } from '../schemas/common.js';

export interface SeedOptions {
  posts: number;
  /** Default: 2 per post. */
  comments?: number;
  /** Default: one per ten posts, at least 1, at most 1000. */
  users?: number;
  onProgress?: (progress: SeedProgress) => void;
  /** Also the demo account /docs's examples name (seedDemo); default false. */
  demo?: boolean;
}

export interface SeedProgress {
  phase: 'users' | 'posts' | 'comments' | 'indexes' | 'totals' | 'analyze' | 'done';
  done: number;
  total: number;
}

export interface SeedResult {
  users: number;
  posts: number;
  comments: number;
  /** Inclusive; [0, -1] when none. */
  userIds: [number, number];
  postIds: [number, number];
  /** The first seeded user's, and every seeded user's password. */
  email: string;
  password: string;
  /** How triggers were bypassed: session_replication_role (superuser) or ALTER TABLE (owner). */
  mode: 'replica' | 'disable-trigger';
  seconds: number;
}

export const DEMO_PASSWORD = 'demo-password';
const BATCH = 100_000;
/** Posts that collect a tenth of all comments. */
const POPULAR_POSTS = 16;

/** Exact totals from the rows themselves, replacing what the triggers would have kept. */
const RECOMPUTE_TOTALS = [
  `INSERT INTO comment_counts (post_id, n)
   SELECT post_id, count(*) FROM comments WHERE post_id BETWEEN $lo::int8 AND $hi::int8 GROUP BY post_id`,
  `DELETE FROM author_post_counts`,
  `INSERT INTO author_post_counts (author_id, n) SELECT author_id, count(*) FROM posts GROUP BY author_id`,
  // Every post counts in every post's list (0) and in its author's (the posts' insert trigger).
  `DELETE FROM post_ranks`,
  `INSERT INTO post_ranks (author_id, bucket, n, first_created, last_created)
   SELECT l.author_id, p.id >> 12, count(*), min(p.created_at), max(p.created_at)
   FROM posts p CROSS JOIN LATERAL (VALUES (0::bigint), (p.author_id)) l (author_id) GROUP BY 1, 2`,
  `INSERT INTO counters (name, n) VALUES ('posts', (SELECT count(*) FROM posts)), ('users', (SELECT count(*) FROM users))
   ON CONFLICT (name) DO UPDATE SET n = excluded.n`,
];

async function nextId(client: pg.PoolClient, table: string): Promise<number> {
  const { rows } = await client.query<{ id: string }>(`SELECT nextval(pg_get_serial_sequence($1, 'id')) AS id`, [
    table,
  ]);
  return Number(rows[0]!.id);
}

/** A load that at least doubles a table rebuilds its indexes (those backing no constraint) after, not row by row. */
async function dropIndexesOfDoubledTables(client: pg.PoolClient, added: Record<string, number>): Promise<string[]> {
  const rebuild: string[] = [];
  for (const [table, adding] of Object.entries(added)) {
    const { rows: count } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`);
    if (adding === 0 || adding < Number(count[0]!.n)) continue;
    const { rows } = await client.query<{ name: string; definition: string }>(
      `SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
       WHERE i.indrelid = $1::regclass
         AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
       ORDER BY i.indexrelid`,
      [table],
    );
    // Names come from the catalog, already quoted by the regclass output.
    for (const { name, definition } of rows) {
      await client.query(`DROP INDEX ${name}`);
      rebuild.push(definition);
    }
  }
  return rebuild;
}

export async function seed(pool: pg.Pool, options: SeedOptions): Promise<SeedResult> {
  const started = performance.now();
  const { posts } = options;
  const users = options.users ?? Math.min(1000, Math.max(1, Math.ceil(posts / 10)));
  const comments = options.comments ?? posts * 2;
  for (const [name, value] of Object.entries({ posts, users, comments })) {
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`seed: ${name} must be a non-negative integer`);
  }
  if (posts > 0 && users < 1) throw new Error('seed: posts need at least one user');
  if (comments > 0 && posts < 1) throw new Error('seed: comments need at least one post');
  const progress = options.onProgress ?? (() => {});
  const hash = await hashPassword(DEMO_PASSWORD);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const mode = await beginLoad(client);
    const userBase = users > 0 ? await nextId(client, 'users') : 0;
    const postBase = posts > 0 ? await nextId(client, 'posts') : 0;
    const commentBase = comments > 0 ? await nextId(client, 'comments') : 0;
    const start = new Date(Date.now() - YEAR_SECONDS * 1000).toISOString();
    const common = { users, n: posts, m: comments, start, userBase, postBase, commentBase };
    const inBatches = async (phase: SeedProgress['phase'], total: number, statement: string, extra: object) => {
      progress({ phase, done: 0, total });
      for (let from = 0; from < total; from += BATCH) {
        const to = Math.min(total, from + BATCH);
        await client.query(bind(statement, { ...common, ...extra, from, to }));
        progress({ phase, done: to, total });
      }
    };
    const inSteps = async (phase: SeedProgress['phase'], queries: (string | pg.QueryConfig)[]) => {
      for (const [k, query] of queries.entries()) {
        if (k === 0) progress({ phase, done: 0, total: queries.length });
        await client.query(query);
        progress({ phase, done: k + 1, total: queries.length });
      }
    };

    await inBatches('users', users, INSERT_USERS, { hash, first: FIRST_NAMES, last: LAST_NAMES });
    for (const texts of [POST_TEXTS, COMMENT_TEXTS])
      await client.query(bind(texts, { corpus: CORPUS, starts: WORD_STARTS }));
    await client.query('ANALYZE seed_post_texts, seed_comment_texts');
    const rebuild = await dropIndexesOfDoubledTables(client, { posts, comments });
    await inBatches('posts', posts, INSERT_POSTS, { adjectives: ADJECTIVES, nouns: NOUNS });
    await inBatches('comments', comments, INSERT_COMMENTS, { popular: Math.min(POPULAR_POSTS, posts) });
    await inSteps('indexes', rebuild);

    // Identity sequences move past the ids assigned, as if the API had inserted them.
    const added = { users: [userBase, users], posts: [postBase, posts], comments: [commentBase, comments] } as const;
    for (const [table, [base, n]] of Object.entries(added)) {
      if (n > 0) await client.query(`SELECT setval(pg_get_serial_sequence($1, 'id'), $2)`, [table, base + n - 1]);
    }
    await inSteps(
      'totals',
      RECOMPUTE_TOTALS.map((statement) => bind(statement, { lo: postBase, hi: postBase + posts - 1 })),
    );
    await endLoad(client, mode);
    if (options.demo) await seedDemo(client, hash);
    await client.query('COMMIT');
    // Fresh statistics, so the planner sees the new sizes before the first request does.
    await client.query('SET statement_timeout = 0');
    await inSteps('analyze', [
      'ANALYZE users, posts, comments, counters, author_post_counts, comment_counts, post_ranks',
    ]);
    await client.query('RESET statement_timeout');

    const seconds = (performance.now() - started) / 1000;
    progress({ phase: 'done', done: 1, total: 1 });
    const range = (base: number, count: number): [number, number] => (count > 0 ? [base, base + count - 1] : [0, -1]);
    const { rows } = await client.query<{ email: string }>('SELECT email FROM users WHERE id = $1', [userBase]);
    return {
      users,
      posts,
      comments,
      userIds: range(userBase, users),
      postIds: range(postBase, posts),
      email: rows[0]?.email ?? '',
      password: DEMO_PASSWORD,
      mode,
      seconds,
    };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const LOADED_TABLES = ['users', 'posts', 'comments'] as const;

/** Session settings, locks and the trigger bypass for the load; returns how triggers were bypassed. */
async function beginLoad(client: pg.PoolClient): Promise<SeedResult['mode']> {
  // The load is long by design; the pool's limits are for requests.
  await client.query(`SET LOCAL statement_timeout = 0`);
  await client.query(`SET LOCAL idle_in_transaction_session_timeout = 0`);
  // Big sorts and hashes in memory; JIT compiling each batch's expressions costs more than it saves.
  await client.query(`SET LOCAL work_mem = '256MB'`);
  await client.query(`SET LOCAL maintenance_work_mem = '256MB'`);
  await client.query(`SET LOCAL jit = off`);
  // Writers wait (the ids below must stay contiguous and the totals exact); readers go on.
  await client.query(
    'LOCK TABLE users, posts, comments, counters, author_post_counts, comment_counts, post_ranks IN EXCLUSIVE MODE',
  );
  const { rows: su } = await client.query<{ on: string }>(`SELECT current_setting('is_superuser') AS on`);
  if (su[0]?.on === 'on') {
    // Skips user triggers and foreign-key checks, for this transaction only.
    await client.query(`SET LOCAL session_replication_role = replica`);
    return 'replica';
  }
  for (const table of LOADED_TABLES) await client.query(`ALTER TABLE ${table} DISABLE TRIGGER USER`);
  return 'disable-trigger';
}

async function endLoad(client: pg.PoolClient, mode: SeedResult['mode']): Promise<void> {
  if (mode === 'replica') await client.query(`SET LOCAL session_replication_role = origin`);
  else for (const table of LOADED_TABLES) await client.query(`ALTER TABLE ${table} ENABLE TRIGGER USER`);
}

/**
 * The demo account /docs's examples name (docs/api.md §13), made once: its e-mail and the ids of its rows are
 * fixed (DEMO_ID), so the examples hold whatever the database held before. Triggers on: counts and events as
 * if the API had made them.
 */
async function seedDemo(client: pg.PoolClient, hash: string): Promise<void> {
  const rows: [into: string, values: string, params: unknown[]][] = [
    ['users (id, email, name, password_hash)', '$1, $2, $3, $4', [DEMO_EMAIL, 'Demo User', hash]],
    ['posts (id, author_id, title, body)', '$1, $1, $2, $3', ['Welcome', 'The demo post.']],
    ['comments (id, post_id, author_id, body)', '$1, $1, $1, $2', ['The demo comment.']],
    // A token nobody holds (the hash of a secret never shown), for the example that revokes one.
    [
      'tokens (id, user_id, token_hash, expires_at)',
      "$1, $1, sha256(gen_random_uuid()::text::bytea), now() + interval '10 years'",
      [],
    ],
  ];
  for (const [into, values, params] of rows) {
    const insert = `INSERT INTO ${into} OVERRIDING SYSTEM VALUE VALUES (${values}) ON CONFLICT DO NOTHING`;
    await client.query(insert, [DEMO_ID, ...params]);
  }
  await seedWebhook(client, DEMO_ID);
}

/** `npm run seed`: a progress display (one line rewritten on a terminal), then a summary with the password. */
export async function seedCommand(
  pool: pg.Pool,
  { posts, comments, users }: Omit<SeedOptions, 'onProgress'>,
  out: { write(text: string): unknown; isTTY?: boolean } = process.stdout,
): Promise<void> {
  const started = performance.now();
  const render = ({ phase, done, total }: SeedProgress) => {
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    const line = `seed: ${phase} ${done.toLocaleString('en')}/${total.toLocaleString('en')} (${secs} s)`;
    if (out.isTTY) out.write(`\r\x1b[K${phase === 'done' ? '' : line}`);
    else if (phase !== 'done') out.write(`${line}\n`);
  };
  const result = await seed(pool, { posts, users, comments, onProgress: render, demo: true });
  out.write(
    `seeded ${result.users} users, ${result.posts} posts, ${result.comments} comments in ${result.seconds.toFixed(1)} s\n` +
      `every seeded user's password is "${result.password}"; e.g. log in with ${DEMO_EMAIL}\n`,
  );
}
