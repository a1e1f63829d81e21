/**
 * Demo data for `npm run seed -- --posts N` and the benchmark: users, posts and
 * comments generated inside PostgreSQL (`INSERT ... SELECT ... FROM
 * generate_series`), a batch of rows per statement so progress can be shown,
 * never row by row from Node (docs/operations.md says how long a million posts take).
 *
 * The data is added to what is there (nothing is wiped), in ONE transaction:
 * all of it or none. Writers wait on a table lock meanwhile; readers do not,
 * except when the load at least doubles a table: building that table's
 * indexes afresh after the load is then much faster than maintaining them row
 * by row, and its readers wait for the rebuild too.
 *
 * Speed: the counting triggers (and, for a superuser, the foreign-key checks)
 * are switched off for the load, which is safe because every id is generated
 * from rows inserted in the same transaction; then every total the triggers
 * keep (`counters`, `author_post_counts`, `posts.comment_count`, `post_floors`) is recomputed
 * exactly from the rows before COMMIT, so the result is indistinguishable from
 * data created through the API.
 *
 * Shape: randomness comes from a hash of each row's ordinal (hashint8extended),
 * so the same arguments always produce the same data, and statements can
 * recompute any row's values (a comment knows its post's creation time without
 * a join). Ids come from the tables' own identity sequences. Timestamps
 * (microsecond precision) span the past year, increase with the id as through
 * the API, and a comment is never older than its post. A few authors are
 * prolific, titles repeat often (ties for `sort=title`), body lengths vary
 * widely, and comments are uneven: a handful of popular posts collect about a
 * tenth of them, recent posts get most of the rest, many posts get none.
 * Every seeded user has the same password (hashed once: scrypt costs ~100 ms).
 * The first user writes the first post and its first comment, so the examples
 * of the OpenAPI document (ids 1, the first user's log-in) work on a freshly seeded database.
 */
import type pg from 'pg';
import { hashPassword } from '../security.js';
import { CHANGES_CHANNEL } from './pool.js';
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
  phase: 'users' | 'plan' | 'posts' | 'comments' | 'indexes' | 'totals' | 'analyze' | 'done';
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
const YEAR_SECONDS = 365 * 86_400;
/** Users signed up during the month before the first post. */
const SIGN_UP_SECONDS = 30 * 86_400;

export function defaultUsers(posts: number): number {
  return Math.min(1000, Math.max(1, Math.ceil(posts / 10)));
}

/**
 * A uniform number in [0, 1) from the row ordinal `x` and a salt naming the
 * attribute: the low 52 bits of a 64-bit hash. Both arguments are constants
 * of this module, never input.
 */
function rnd(x: string, salt: number): string {
  return `((hashint8extended((${x})::int8, ${salt}) & 4503599627370495)::float8 / 4503599627370496)`;
}

const FIRST_NAMES = [
  'Ada', 'Alan', 'Grace', 'Linus', 'Margaret', 'Dennis', 'Barbara', 'Ken', 'Frances', 'Edsger', 'Radia', 'Donald',
  'Hedy', 'John', 'Katherine', 'Tim', 'Sophie', 'Niklaus', 'Anita', 'Guido', 'Joan', 'Bjarne', 'Shafi', 'James',
  'Lynn', 'Yukihiro', 'Mary', 'Leslie', 'Evelyn', 'Rob', 'Adele', 'Brian', 'Jean', 'Larry', 'Carol', 'Ward',
  'Fran', 'Whitfield', 'Annie', 'Vint', 'Ruth', 'Tony', 'Kathleen', 'Butler', 'Susan', 'Charles', 'Ida', 'Andrew',
];
const LAST_NAMES = [
  'Lovelace', 'Turing', 'Hopper', 'Torvalds', 'Hamilton', 'Ritchie', 'Liskov', 'Thompson', 'Allen', 'Dijkstra',
  'Perlman', 'Knuth', 'Lamarr', 'McCarthy', 'Johnson', 'Berners-Lee', 'Wilson', 'Wirth', 'Borg', 'van Rossum',
  'Clarke', 'Stroustrup', 'Goldwasser', 'Gosling', 'Conway', 'Matsumoto', 'Keller', 'Lamport', 'Berezin', 'Pike',
  'Goldberg', 'Kernighan', 'Sammet', 'Wall', 'Shaw', 'Cunningham', 'Diffie', 'Easley', 'Cerf', 'Teitelman',
  'Hoare', 'Booth', 'Lampson', 'Kare', 'Babbage', 'Rhodes', 'Tanenbaum', 'Estrin',
];
const ADJECTIVES = [
  'Understanding', 'Practical', 'Notes on', 'Revisiting', 'A Gentle Guide to', 'Debugging', 'Scaling', 'Testing',
  'Why I Stopped Using', 'Thoughts on', 'Benchmarking', 'The Trouble with', 'Designing', 'Migrating to',
  'Lessons from', 'Rethinking', 'Profiling', 'Securing', 'Deploying', 'Learning',
];
const NOUNS = [
  'PostgreSQL', 'Keyset Pagination', 'Node.js Streams', 'TypeScript Generics', 'Connection Pools', 'Indexes',
  'Rate Limiting', 'JSON Schemas', 'HTTP Caching', 'Event Loops', 'Transactions', 'Microservices', 'REST APIs',
  'Background Jobs', 'Observability', 'Feature Flags', 'Docker Images', 'Load Balancers', 'Unit Tests', 'Monorepos',
  'Error Handling', 'Time Zones', 'Unicode', 'Code Review', 'Garbage Collection',
];
const CORPUS_TEXT =
  'The first version worked on my laptop and failed in production within an hour. The database was fine; the ' +
  'pool was not. Every request opened a transaction, waited on a lock held by a slow report, and the queue grew ' +
  'until the load balancer gave up. We measured before changing anything. The flame graph showed most of the time ' +
  'in serialization, not in the queries we had suspected. Moving the date formatting into SQL halved the cost of a ' +
  'list page. Then we looked at pagination. Offset pages are simple and users like page numbers, but the database ' +
  'still walks every skipped row, so page ten thousand costs ten thousand times page one. A cursor remembers where ' +
  'the last page ended and asks only for what follows, using an index that matches the order. Totals were the next ' +
  'surprise: counting a large table on every request is a full scan in disguise. Keeping the count in a small table, ' +
  'updated in the same transaction as the write, makes it exact and cheap. None of this is new. It is written down ' +
  'in old mailing list threads and in the documentation, which rewards a slow reading. What surprised me was how ' +
  'much of the work was deciding what the service promises: which errors a client may see, which fields it may ' +
  'send back, what happens to a cursor when its item is deleted. Once the contract was clear, the code got smaller. ' +
  'Tests against a real database caught more bugs than any mock ever did, and they run in seconds when each file ' +
  'gets a fresh copy of a migrated template. I would do it again, with fewer abstractions and more measurements. ' +
  'If you try this at home, start with the slow query log, keep an eye on the connection count, and remember that ' +
  'the fastest request is the one the cache answers. Questions and corrections are welcome in the comments below; ' +
  'I read all of them, even when I am too slow to reply. Thanks to everyone who reviewed the draft of this post.';
// Doubled, so a substring starting anywhere in the first copy never runs short.
const CORPUS = `${CORPUS_TEXT} ${CORPUS_TEXT}`;
const WORD_STARTS = [...CORPUS_TEXT.matchAll(/(?<=^|\. )[A-Z]/g)].map((m) => m.index + 1);

/**
 * Every other word of the seeded texts is in at least 2 % of the posts; real
 * text has a long tail. One title in 20 000 ends with this word, so a search
 * for a rare word has something to find (the benchmark's rare search).
 */
export const RARE_WORD = 'quokka';
const RARE_WORD_SHARE = 1 / 20_000;

/** Distinct bodies per kind; rows pick one by hash, so no text is cut per row. */
const TEXT_VARIANTS = 4096;

/**
 * TEXT_VARIANTS texts, each about `length` characters of the corpus, starting
 * at a sentence chosen by `pick` in [0, 1) and ending at the end of a word.
 */
const texts = (table: string, pick: string, length: string) => `
  CREATE TEMP TABLE ${table} ON COMMIT DROP AS
  SELECT k, substr($corpus::text, s, l) || split_part(substr($corpus::text, s + l, 40), ' ', 1) AS body
  FROM generate_series(0, ${TEXT_VARIANTS - 1}) k
  CROSS JOIN LATERAL (SELECT ($starts::int4[])[1 + floor(${pick} * cardinality($starts::int4[]))::int4] AS s, ${length} AS l) x`;

const POST_TEXTS = texts('seed_post_texts', rnd('k', 31), `30 + floor(1500 * ${rnd('k', 32)} ^ 3)::int4`);
const COMMENT_TEXTS = texts('seed_comment_texts', rnd('k', 33), `8 + floor(600 * ${rnd('k', 34)} ^ 3)::int4`);

/**
 * Statements use named placeholders ($name) for readability; they become
 * positional parameters here.
 */
function bind(text: string, params: Record<string, unknown>): { text: string; values: unknown[] } {
  const names: string[] = [];
  const out = text.replace(/\$([a-zA-Z]+)/g, (_, name: string) => {
    if (!(name in params)) throw new Error(`seed: no value for $${name}`);
    let i = names.indexOf(name);
    if (i < 0) i = names.push(name) - 1;
    return `$${i + 1}`;
  });
  return { text: out, values: names.map((n) => params[n]) };
}

// Ordinals (0-based within this seed run): u for users, i for posts, j for comments.
// $n::int8 posts, $m::int8 comments, $users::int8 users; $start is the first post's earliest time.
const POST_TIME = `((i + ${rnd('i', 1)}) / $n::int8)`;
/** A comment's position on the timeline, and the post it answers (an ordinal < the posts existing by then). */
const COMMENT_PLAN = `
  generate_series($from::int8, $to::int8 - 1) j
  CROSS JOIN LATERAL (SELECT (j + ${rnd('j', 11)}) / $m::int8 AS tau) t
  CROSS JOIN LATERAL (SELECT LEAST($n::int8, GREATEST(1, floor($n::int8 * t.tau)::int8)) AS avail) a
  CROSS JOIN LATERAL (SELECT CASE
      WHEN j = 0 THEN 0
      WHEN ${rnd('j', 12)} < 0.1 THEN
        floor(floor(${rnd('j', 13)} * (floor((a.avail - 1) * $popular::int8 / $n::int8) + 1)) * $n::int8 / $popular::int8)::int8
      ELSE a.avail - 1 - floor(a.avail * ${rnd('j', 13)} ^ 2)::int8
    END AS p) c`;

const INSERT_USERS = `
  INSERT INTO users (id, email, name, role, password_hash, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $userBase::int8 + u, lower(replace(f.first || '.' || f.last, ' ', '')) || '.' || ($userBase::int8 + u) || '@example.com',
    f.first || ' ' || f.last, 'user', $hash::text, f.at, f.at
  FROM generate_series($from::int8, $to::int8 - 1) u
  CROSS JOIN LATERAL (SELECT
    ($first::text[])[1 + floor(${rnd('u', 21)} * cardinality($first::text[]))::int4] AS first,
    ($last::text[])[1 + floor(${rnd('u', 22)} * cardinality($last::text[]))::int4] AS last,
    $start::timestamptz - make_interval(secs => ${rnd('u', 23)} * ${SIGN_UP_SECONDS}) AS at) f`;

const PLAN_COMMENTS = `
  INSERT INTO seed_comment_plan (ord, n)
  SELECT c.p, count(*) FROM ${COMMENT_PLAN} GROUP BY c.p`;

const INSERT_POSTS = `
  INSERT INTO posts (id, author_id, title, body, comment_count, version, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $postBase::int8 + i,
    $userBase::int8 + CASE WHEN i = 0 THEN 0 ELSE floor($users::int8 * ${rnd('i', 4)} ^ 2)::int8 END,
    ($adjectives::text[])[1 + floor(${rnd('i', 5)} * cardinality($adjectives::text[]))::int4] || ' ' ||
      ($nouns::text[])[1 + floor(${rnd('i', 6)} * cardinality($nouns::text[]))::int4] ||
      CASE WHEN ${rnd('i', 7)} < 0.3 THEN ', part ' || (1 + floor(${rnd('i', 8)} * 12)::int4) ELSE '' END ||
      CASE WHEN ${rnd('i', 10)} < ${RARE_WORD_SHARE} THEN ' ' || '${RARE_WORD}' ELSE '' END,
    b.body,
    COALESCE(cc.n, 0),
    CASE WHEN t.edited THEN 2 ELSE 1 END,
    t.created,
    CASE WHEN t.edited THEN t.created + (now() - t.created) * ${rnd('i', 3)} ^ 2 ELSE t.created END
  FROM generate_series($from::int8, $to::int8 - 1) i
  CROSS JOIN LATERAL (SELECT $start::timestamptz + make_interval(secs => ${POST_TIME} * ${YEAR_SECONDS}) AS created,
    ${rnd('i', 2)} < 0.25 AS edited) t
  JOIN seed_post_texts b ON b.k = floor(${rnd('i', 9)} * ${TEXT_VARIANTS})::int4
  LEFT JOIN seed_comment_counts cc ON cc.ord = i`;

const INSERT_COMMENTS = `
  INSERT INTO comments (id, post_id, author_id, body, version, created_at, updated_at) OVERRIDING SYSTEM VALUE
  SELECT $commentBase::int8 + j, $postBase::int8 + c.p,
    $userBase::int8 + CASE WHEN j = 0 THEN 0 ELSE floor($users::int8 * ${rnd('j', 14)})::int8 END,
    b.body,
    CASE WHEN e.edited THEN 2 ELSE 1 END,
    e.created,
    CASE WHEN e.edited THEN e.created + (now() - e.created) * ${rnd('j', 15)} ^ 3 ELSE e.created END
  FROM ${COMMENT_PLAN}
  CROSS JOIN LATERAL (SELECT $start::timestamptz + make_interval(secs =>
      GREATEST(t.tau, ((c.p + ${rnd('c.p', 1)}) / $n::int8)) * ${YEAR_SECONDS}) AS created,
    ${rnd('j', 18)} < 0.1 AS edited) e
  JOIN seed_comment_texts b ON b.k = floor(${rnd('j', 17)} * ${TEXT_VARIANTS})::int4`;

/** Exact totals from the rows themselves, replacing what the triggers would have kept. */
const RECOMPUTE_TOTALS = [
  `UPDATE posts p SET comment_count = COALESCE(c.n, 0)
   FROM posts p2 LEFT JOIN (SELECT post_id, count(*) AS n FROM comments WHERE post_id BETWEEN $lo::int8 AND $hi::int8 GROUP BY post_id) c
     ON c.post_id = p2.id
   WHERE p2.id BETWEEN $lo::int8 AND $hi::int8 AND p.id = p2.id AND p.comment_count <> COALESCE(c.n, 0)`,
  `DELETE FROM author_post_counts`,
  `INSERT INTO author_post_counts (author_id, slot, n) SELECT author_id, 0, count(*) FROM posts GROUP BY author_id`,
  `DELETE FROM counters WHERE name IN ('posts', 'users')`,
  `INSERT INTO counters (name, slot, n)
   SELECT 'posts', 0, (SELECT count(*) FROM posts) UNION ALL SELECT 'users', 0, (SELECT count(*) FROM users)`,
  `DELETE FROM post_floors`,
  `INSERT INTO post_floors (hour, min_id) SELECT post_hour(created_at), min(id) FROM posts GROUP BY 1`,
];

async function nextId(client: pg.PoolClient, table: 'users' | 'posts' | 'comments'): Promise<number> {
  const { rows } = await client.query<{ id: string }>(`SELECT nextval(pg_get_serial_sequence($1, 'id')) AS id`, [table]);
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
  const posts = options.posts;
  const users = options.users ?? defaultUsers(posts);
  const comments = options.comments ?? Math.round(posts * (options.commentsPerPost ?? 2));
  const batch = options.batchSize ?? DEFAULT_BATCH;
  const password = options.password ?? DEMO_PASSWORD;
  const progress = options.onProgress ?? (() => {});
  for (const [name, value] of Object.entries({ posts, users, comments, batch })) {
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`seed: ${name} must be a non-negative integer`);
  }
  if (posts > 0 && users < 1) throw new Error('seed: posts need at least one user');
  if (comments > 0 && posts < 1) throw new Error('seed: comments need at least one post');

  const hash = await hashPassword(password);
  const client = await pool.connect();
  let mode: SeedResult['mode'] = 'replica';
  try {
    await client.query('BEGIN');
    // The load is long by design; the pool's limits are for requests.
    await client.query(`SET LOCAL statement_timeout = 0`);
    await client.query(`SET LOCAL idle_in_transaction_session_timeout = 0`);
    // Big sorts and hashes in memory; JIT compiling each batch's expressions costs more than it saves.
    await client.query(`SET LOCAL work_mem = '256MB'`);
    await client.query(`SET LOCAL maintenance_work_mem = '256MB'`);
    await client.query(`SET LOCAL jit = off`);
    // Writers wait (the ids below must stay contiguous and the totals exact); readers go on.
    await client.query('LOCK TABLE users, posts, comments, counters, author_post_counts, post_floors IN EXCLUSIVE MODE');
    const { rows: su } = await client.query<{ on: string }>(`SELECT current_setting('is_superuser') AS on`);
    if (su[0]?.on === 'on') {
      // Skips user triggers and foreign-key checks, for this transaction only.
      await client.query(`SET LOCAL session_replication_role = replica`);
    } else {
      mode = 'disable-trigger';
      for (const table of ['users', 'posts', 'comments']) await client.query(`ALTER TABLE ${table} DISABLE TRIGGER USER`);
    }

    const userBase = users > 0 ? await nextId(client, 'users') : 0;
    const postBase = posts > 0 ? await nextId(client, 'posts') : 0;
    const commentBase = comments > 0 ? await nextId(client, 'comments') : 0;
    const start = new Date(Date.now() - YEAR_SECONDS * 1000).toISOString();
    const common = { users, n: posts, m: comments, start, userBase, postBase, commentBase };

    const inBatches = async (phase: SeedProgress['phase'], total: number, statement: string, extra: object) => {
      progress({ phase, done: 0, total });
      for (let from = 0; from < total; from += batch) {
        const to = Math.min(total, from + batch);
        await client.query(bind(statement, { ...common, ...extra, from, to }));
        progress({ phase, done: to, total });
      }
    };

    await inBatches('users', users, INSERT_USERS, { hash, first: FIRST_NAMES, last: LAST_NAMES });

    // Each post's comment count is known before the post is written, so no post row is rewritten later.
    await client.query('CREATE TEMP TABLE seed_comment_plan (ord int8 NOT NULL, n int8 NOT NULL) ON COMMIT DROP');
    await inBatches('plan', comments, PLAN_COMMENTS, { popular: Math.min(POPULAR_POSTS, posts) });
    // Several batches may name the same post: their counts add up.
    await client.query(`CREATE TEMP TABLE seed_comment_counts ON COMMIT DROP AS
      SELECT ord, sum(n)::int8 AS n FROM seed_comment_plan GROUP BY ord`);
    await client.query('ALTER TABLE seed_comment_counts ADD PRIMARY KEY (ord)');
    await client.query('ANALYZE seed_comment_counts');

    const corpus = { corpus: CORPUS, starts: WORD_STARTS };
    await client.query(bind(POST_TEXTS, corpus));
    await client.query(bind(COMMENT_TEXTS, corpus));
    await client.query('ANALYZE seed_post_texts, seed_comment_texts');

    // Maintaining a table's secondary indexes row by row costs far more than
    // building them afresh once the rows are in, whenever the load at least
    // doubles the table.
    const rebuild: string[] = [];
    for (const [table, adding] of [['posts', posts], ['comments', comments]] as const) {
      const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`);
      if (adding > 0 && adding >= Number(rows[0]!.n)) rebuild.push(...(await dropSecondaryIndexes(client, table)));
    }

    await inBatches('posts', posts, INSERT_POSTS, { adjectives: ADJECTIVES, nouns: NOUNS });
    await inBatches('comments', comments, INSERT_COMMENTS, { popular: Math.min(POPULAR_POSTS, posts) });

    if (rebuild.length > 0) {
      progress({ phase: 'indexes', done: 0, total: rebuild.length });
      for (const [k, definition] of rebuild.entries()) {
        await client.query(definition);
        progress({ phase: 'indexes', done: k + 1, total: rebuild.length });
      }
    }

    if (users > 0) await reserveIds(client, 'users', userBase + users - 1);
    if (posts > 0) await reserveIds(client, 'posts', postBase + posts - 1);
    if (comments > 0) await reserveIds(client, 'comments', commentBase + comments - 1);

    progress({ phase: 'totals', done: 0, total: RECOMPUTE_TOTALS.length });
    for (const [k, statement] of RECOMPUTE_TOTALS.entries()) {
      await client.query(bind(statement, { lo: postBase, hi: postBase + posts - 1 }));
      progress({ phase: 'totals', done: k + 1, total: RECOMPUTE_TOTALS.length });
    }
    if (mode === 'disable-trigger') {
      for (const table of ['users', 'posts', 'comments']) await client.query(`ALTER TABLE ${table} ENABLE TRIGGER USER`);
    }
    if (users > 0) await seedWebhook(client, userBase);
    // The bypassed triggers would have told running instances to drop their cached answers.
    await client.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, '']);
    await client.query('COMMIT');

    // Fresh statistics, so the planner sees the new sizes before the first request does.
    progress({ phase: 'analyze', done: 0, total: 1 });
    await client.query('SET statement_timeout = 0');
    await client.query('ANALYZE users, posts, comments, counters, author_post_counts, post_floors');
    await client.query('RESET statement_timeout');
    progress({ phase: 'analyze', done: 1, total: 1 });

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
