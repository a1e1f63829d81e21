/**
 * Demo data for `npm run seed -- --posts N` and the benchmark, generated inside
 * PostgreSQL in one transaction, triggers bypassed and totals recomputed
 * (docs/architecture.md, "The demo data").
 */
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
import { seedWebhook } from '../events/webhooks/seed.js';

export interface SeedOptions {
  posts: number;
  /** Default: 2 per post. */
  commentsPerPost?: number;
  /** An exact number of comments instead of commentsPerPost. */
  comments?: number;
  /** Default: one per ten posts, at least 1, at most 1000. */
  users?: number;
  /** Default: DEMO_PASSWORD. */
  password?: string;
  /** Rows per INSERT statement. */
  batchSize?: number;
  onProgress?: (progress: SeedProgress) => void;
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
  /** Id ranges of the rows added (inclusive; empty range when none). */
  userIds: [number, number];
  postIds: [number, number];
  commentIds: [number, number];
  /** E-mail of the first seeded user, and the password every seeded user has. */
  email: string;
  password: string;
  /** How the triggers were bypassed: session_replication_role (superuser) or ALTER TABLE (owner). */
  mode: 'replica' | 'disable-trigger';
  seconds: number;
}

export const DEMO_PASSWORD = 'demo-password';
const DEFAULT_BATCH = 100_000;
/** Posts that collect a tenth of all comments. */
const POPULAR_POSTS = 16;

export function defaultUsers(posts: number): number {
  return Math.min(1000, Math.max(1, Math.ceil(posts / 10)));
}

/** Exact totals from the rows themselves, replacing what the triggers would have kept. */
const RECOMPUTE_TOTALS = [
  `INSERT INTO comment_counts (post_id, n)
   SELECT post_id, count(*) FROM comments WHERE post_id BETWEEN $lo::int8 AND $hi::int8 GROUP BY post_id`,
  `DELETE FROM author_post_counts`,
  `INSERT INTO author_post_counts (author_id, n) SELECT author_id, count(*) FROM posts GROUP BY author_id`,
  `INSERT INTO counters (name, n) VALUES ('posts', (SELECT count(*) FROM posts)), ('users', (SELECT count(*) FROM users))
   ON CONFLICT (name) DO UPDATE SET n = excluded.n`,
];

async function nextId(client: pg.PoolClient, table: 'users' | 'posts' | 'comments'): Promise<number> {
  const { rows } = await client.query<{ id: string }>(`SELECT nextval(pg_get_serial_sequence($1, 'id')) AS id`, [
    table,
  ]);
  return Number(rows[0]!.id);
}

/** Moves the table's identity sequence past the ids we assigned, as if the API had inserted them. */
async function reserveIds(client: pg.PoolClient, table: 'users' | 'posts' | 'comments', last: number): Promise<void> {
  await client.query(`SELECT setval(pg_get_serial_sequence($1, 'id'), $2)`, [table, last]);
}

/**
 * Drops the table's indexes that back no constraint and returns their
 * definitions, to be run again after the load (in the same transaction).
 */
async function dropSecondaryIndexes(client: pg.PoolClient, table: 'posts' | 'comments'): Promise<string[]> {
  const { rows } = await client.query<{ name: string; definition: string }>(
    `SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
     FROM pg_index i
     WHERE i.indrelid = $1::regclass
       AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
     ORDER BY i.indexrelid`,
    [table],
  );
  // Names come from the catalog, already quoted by the regclass output.
  for (const { name } of rows) await client.query(`DROP INDEX ${name}`);
  return rows.map((r) => r.definition);
}

export async function seed(pool: pg.Pool, options: SeedOptions): Promise<SeedResult> {
  const started = performance.now();
  const counts = seedCounts(options);
  const { posts, users, comments } = counts;
  const password = options.password ?? DEMO_PASSWORD;
  const progress = options.onProgress ?? (() => {});
  const hash = await hashPassword(password);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const mode = await beginLoad(client);
    const userBase = users > 0 ? await nextId(client, 'users') : 0;
    const postBase = posts > 0 ? await nextId(client, 'posts') : 0;
    const commentBase = comments > 0 ? await nextId(client, 'comments') : 0;
    const start = new Date(Date.now() - YEAR_SECONDS * 1000).toISOString();
    const common = { users, n: posts, m: comments, start, userBase, postBase, commentBase };
    const load: Load = { client, progress, batch: counts.batch, common };

    await inBatches(load, 'users', users, INSERT_USERS, { hash, first: FIRST_NAMES, last: LAST_NAMES });
    const corpus = { corpus: CORPUS, starts: WORD_STARTS };
    await client.query(bind(POST_TEXTS, corpus));
    await client.query(bind(COMMENT_TEXTS, corpus));
    await client.query('ANALYZE seed_post_texts, seed_comment_texts');
    const rebuild = await dropIndexesOfDoubledTables(client, posts, comments);
    await inBatches(load, 'posts', posts, INSERT_POSTS, { adjectives: ADJECTIVES, nouns: NOUNS });
    await inBatches(load, 'comments', comments, INSERT_COMMENTS, { popular: Math.min(POPULAR_POSTS, posts) });
    await inSteps(progress, 'indexes', rebuild, (definition) => client.query(definition));

    if (users > 0) await reserveIds(client, 'users', userBase + users - 1);
    if (posts > 0) await reserveIds(client, 'posts', postBase + posts - 1);
    if (comments > 0) await reserveIds(client, 'comments', commentBase + comments - 1);
    await inSteps(progress, 'totals', RECOMPUTE_TOTALS, (statement) =>
      client.query(bind(statement, { lo: postBase, hi: postBase + posts - 1 })),
    );
    await endLoad(client, mode);
    if (users > 0) await seedWebhook(client, userBase);
    await client.query('COMMIT');
    await analyze(client, progress);

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
      commentIds: range(commentBase, comments),
      email: rows[0]?.email ?? '',
      password,
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

function seedCounts(options: SeedOptions): { posts: number; users: number; comments: number; batch: number } {
  const posts = options.posts;
  const users = options.users ?? defaultUsers(posts);
  const comments = options.comments ?? Math.round(posts * (options.commentsPerPost ?? 2));
  const batch = options.batchSize ?? DEFAULT_BATCH;
  for (const [name, value] of Object.entries({ posts, users, comments, batch })) {
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`seed: ${name} must be a non-negative integer`);
  }
  if (posts > 0 && users < 1) throw new Error('seed: posts need at least one user');
  if (comments > 0 && posts < 1) throw new Error('seed: comments need at least one post');
  return { posts, users, comments, batch };
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
    'LOCK TABLE users, posts, comments, counters, author_post_counts, comment_counts IN EXCLUSIVE MODE',
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
  if (mode !== 'disable-trigger') return;
  for (const table of LOADED_TABLES) await client.query(`ALTER TABLE ${table} ENABLE TRIGGER USER`);
}

interface Load {
  client: pg.PoolClient;
  progress: (progress: SeedProgress) => void;
  batch: number;
  common: object;
}

async function inBatches(
  { client, progress, batch, common }: Load,
  phase: SeedProgress['phase'],
  total: number,
  statement: string,
  extra: object,
): Promise<void> {
  progress({ phase, done: 0, total });
  for (let from = 0; from < total; from += batch) {
    const to = Math.min(total, from + batch);
    await client.query(bind(statement, { ...common, ...extra, from, to }));
    progress({ phase, done: to, total });
  }
}

async function inSteps<T>(
  progress: (progress: SeedProgress) => void,
  phase: SeedProgress['phase'],
  steps: readonly T[],
  run: (step: T) => Promise<unknown>,
): Promise<void> {
  if (steps.length === 0) return;
  progress({ phase, done: 0, total: steps.length });
  for (const [k, step] of steps.entries()) {
    await run(step);
    progress({ phase, done: k + 1, total: steps.length });
  }
}

/** Building indexes afresh beats maintaining them row by row once a load at least doubles a table. */
async function dropIndexesOfDoubledTables(client: pg.PoolClient, posts: number, comments: number): Promise<string[]> {
  const rebuild: string[] = [];
  for (const [table, adding] of [
    ['posts', posts],
    ['comments', comments],
  ] as const) {
    const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`);
    if (adding > 0 && adding >= Number(rows[0]!.n)) rebuild.push(...(await dropSecondaryIndexes(client, table)));
  }
  return rebuild;
}

/** Fresh statistics, so the planner sees the new sizes before the first request does. */
async function analyze(client: pg.PoolClient, progress: (progress: SeedProgress) => void): Promise<void> {
  progress({ phase: 'analyze', done: 0, total: 1 });
  await client.query('SET statement_timeout = 0');
  await client.query('ANALYZE users, posts, comments, counters, author_post_counts, comment_counts');
  await client.query('RESET statement_timeout');
  progress({ phase: 'analyze', done: 1, total: 1 });
}

/** `npm run seed -- --posts N [--comments N] [--users N]` (src/cli.ts reads the arguments). */
export interface Output {
  write(text: string): unknown;
  isTTY?: boolean;
}

/** A progress display, then a summary with the demo password. */
export async function seedCommand(
  pool: pg.Pool,
  { posts, comments, users }: Pick<SeedOptions, 'posts' | 'comments' | 'users'>,
  out: Output = process.stdout,
): Promise<void> {
  // A terminal gets one line rewritten in place; a log file gets plain lines.
  const started = performance.now();
  const render = ({ phase, done, total }: SeedProgress) => {
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    const line = `seed: ${phase} ${done.toLocaleString('en')}/${total.toLocaleString('en')} (${secs} s)`;
    if (out.isTTY) out.write(`\r\x1b[K${phase === 'done' ? '' : line}`);
    else if (phase !== 'done') out.write(`${line}\n`);
  };
  const result = await seed(pool, { posts, users, comments, onProgress: render });
  out.write(
    `seeded ${result.users} users, ${result.posts} posts, ${result.comments} comments in ${result.seconds.toFixed(1)} s\n` +
      (result.users > 0
        ? `every seeded user's password is "${result.password}"; e.g. log in with ${result.email}\n`
        : ''),
  );
}
