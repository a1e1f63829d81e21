/**
 * `npm run bench` — the benchmark (figures, not tests):
 *
 *   1. builds the service for production (`npm run build`);
 *   2. loads the data set (1 000 000 posts, 2 000 000 comments, 1 000 users)
 *      into a database of its own with the seed's bulk SQL, plus a 10 000-post
 *      one, reusing both when a previous run left them at the right size;
 *   3. runs `node dist/src/server.js` on each as a child process, and the bare
 *      Fastify baseline (the HTTP ceiling) as a third;
 *   4. drives them with autocannon from this process (32 connections),
 *      scenario after scenario, interleaved over several rounds, and after
 *      each scenario runs pgbench with the service's own SQL for it (the
 *      database ceiling);
 *   5. writes bench/RESULTS.md (between its markers, keeping the hand-written
 *      text around them): medians of req/s, p50/p99, CPU per request of the
 *      service process (/proc/<pid>/stat) and its peak RSS (VmHWM), as
 *      ratios to the ceilings measured in the same run, and the targets.
 *
 * `npm run bench -- --smoke`: a few thousand rows and one short round, for CI;
 * writes bench/out/ instead of RESULTS.md. Either mode exits non-zero if any
 * request errored or got a non-2xx answer, and prints a one-line summary.
 * `--profile` also writes a V8 CPU profile of each service to bench/out/profiles/.
 * BENCH_DATABASE_URL: a PostgreSQL server to use (its maintenance database);
 * default: the local one on 127.0.0.1:5432 if it answers, else an embedded one.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import autocannon, { type Request as LoadRequest } from 'autocannon';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { DEMO_PASSWORD } from '../src/db/seed.js';
import { benchServer, cleanUp, ensureDataset, type Dataset, type DataSize } from './dataset.js';
import { captureQueries, findPgbench, pgbenchScript, runPgbench, writeScript, type PgbenchResult } from './pgbench.js';
import { writeResults, type Outcome, type Sample, type Scenario } from './report.js';

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
  },
});
const SMOKE = flags.smoke === true;
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
      // five rounds keep one bad minute out of the medians.
      rounds: 5,
      seconds: 4,
      warmupSeconds: 2,
      depth: 500_000,
    };
const ROUNDS = flags.rounds ? Number(flags.rounds) : PLAN.rounds;
const SECONDS = flags.seconds ? Number(flags.seconds) : PLAN.seconds;
const CONNECTIONS = 32;
const PG_POOL_MAX = 10;
const LOGINS = 8;

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

async function startChild(name: string, args: string[], env: Record<string, string>, port: number): Promise<Child> {
  await mkdir(OUT, { recursive: true });
  const errFd = openSync(join(OUT, `${name}.stderr.log`), 'w');
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', errFd] });
  closeSync(errFd);
  let exited = false;
  const exit = new Promise<void>((done) => child.once('exit', () => ((exited = true), done())));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`${name} exited during start-up; see bench/out/${name}.stderr.log`);
    try {
      const res = await fetch(`${url}${name === 'baseline' ? '/posts' : '/health/ready'}`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${name} did not become ready in 30 s`);
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
  const words = script?.split(/\s+/).filter(Boolean) ?? [];
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
  }, port);
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
  tokens: string[];
  popularPost: number;
  author: { id: number; page: number };
  deepCursor: number;
  secondCursor: number;
  deepPage: number;
  postIds: [number, number];
}

const POST_BODY = JSON.stringify({
  title: 'Benchmarking the posts API',
  body: 'A post written by the benchmark. It has a couple of sentences, like a short real one would, and is deleted after the run.',
});

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

/** The same request on an instance with the cache off. */
function uncached(s: Scenario<Context>, on: 'bigUncached' | 'small' = 'bigUncached', id = `${s.id}-uncached`): Scenario<Context> {
  return { id, title: on === 'small' ? 'same, cache off, on the 10 000-post database' : 'same, cache off', on, method: s.method, path: s.path };
}

const ALL_SCENARIOS: Scenario<Context>[] = [
  CEILING,
  LIST_FIRST,
  uncached(LIST_FIRST),
  uncached(LIST_FIRST, 'small', 'list-first-10k-uncached'),
  AUTHOR_PAGE,
  uncached(AUTHOR_PAGE),
  { id: 'offset-deep-uncached', title: 'GET /posts?page=25001 (OFFSET 500 000), cache off', on: 'bigUncached', method: 'GET', path: (c) => `/posts?page=${c.deepPage}` },
  CURSOR_DEEP,
  uncached(CURSOR_DEEP),
  CURSOR_FIRST,
  uncached(CURSOR_FIRST),
  { id: 'cursor-second-uncached', title: 'GET /posts?after={20th id}&limit=20, cache off (second cursor page: resolves its cursor like the deep one)', on: 'bigUncached', method: 'GET', path: (c) => `/posts?after=${c.secondCursor}&limit=20` },
  { id: 'post-by-id', title: 'GET /posts/{id} (random ids among a million: nearly all cache misses)', on: 'big', method: 'GET', path: () => '/posts/:id', randomPostId: true, target: 0.4 },
  { id: 'create-post', title: 'POST /posts (8 users, bearer tokens)', on: 'big', method: 'POST', path: () => '/posts', authenticated: true, target: 0.25 },
  POPULAR_COMMENTS,
  uncached(POPULAR_COMMENTS),
];


const SCENARIOS = flags.only
  ? ALL_SCENARIOS.filter((s) => s.id === 'ceiling' || flags.only!.split(',').includes(s.id))
  : ALL_SCENARIOS;

function randomId([lo, hi]: [number, number]): number {
  return lo + Math.floor(Math.random() * (hi - lo + 1));
}

function loadRequests(s: Scenario<Context>, ctx: Context): LoadRequest[] {
  const path = s.path(ctx);
  if (s.randomPostId) {
    return [{ method: 'GET', path, setupRequest: (req) => ({ ...req, path: path.replace(':id', String(randomId(ctx.postIds))) }) }];
  }
  if (s.authenticated) {
    let next = 0;
    return [
      {
        method: s.method,
        path,
        body: POST_BODY,
        setupRequest: (req) => ({
          ...req,
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${ctx.tokens[(next += 1) % ctx.tokens.length]!}`,
          },
        }),
      },
    ];
  }
  return [{ method: s.method, path }];
}

async function drive(s: Scenario<Context>, ctx: Context, seconds: number): Promise<Sample> {
  const target = ctx[s.on];
  const cpu0 = cpuSeconds(target.pid);
  const db0 = postgresCpu();
  const result = await autocannon({
    url: target.url,
    connections: CONNECTIONS,
    duration: seconds,
    pipelining: 1,
    timeout: 30,
    requests: loadRequests(s, ctx),
  });
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

async function scenarioContext(big: Dataset): Promise<Omit<Context, 'big' | 'bigUncached' | 'small' | 'baseline' | 'tokens'>> {
  const popular = await one<{ id: number }>(big.url, 'SELECT id::int FROM posts ORDER BY comment_count DESC, id LIMIT 1');
  // The least prolific author who still has a 20th page (or the most prolific, on a small data set).
  const author = await one<{ id: number; posts: number }>(
    big.url,
    `SELECT author_id::int AS id, n::int AS posts FROM (SELECT author_id, sum(n) AS n FROM author_post_counts GROUP BY 1) c
       ORDER BY n >= 400 DESC, CASE WHEN n >= 400 THEN n END ASC, n DESC LIMIT 1`,
  );
  const nth = (n: number) => one<{ id: number }>(big.url, 'SELECT id::int FROM posts ORDER BY id OFFSET $1 - 1 LIMIT 1', [n]);
  const [deep, second] = [await nth(PLAN.depth), await nth(20)];
  return {
    popularPost: popular.id,
    author: { id: author.id, page: Math.max(1, Math.min(20, Math.floor(author.posts / 20))) },
    deepCursor: deep.id,
    secondCursor: second.id,
    deepPage: PLAN.depth / 20 + 1,
    postIds: [1, big.size.posts],
  };
}

async function logIn(service: Child, dataset: Dataset): Promise<string[]> {
  const client = new pg.Client({ connectionString: dataset.url });
  await client.connect();
  const { rows } = await client.query<{ email: string }>('SELECT email FROM users ORDER BY id LIMIT $1', [LOGINS]);
  await client.end();
  return Promise.all(
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
        const sampleId = Math.floor((ctx.postIds[0] + ctx.postIds[1]) / 2);
        const url = s.path(ctx).replace(':id', String(sampleId));
        const files: string[] = [];
        for (const [k, token] of (s.authenticated ? ctx.tokens : [undefined]).entries()) {
          let status = 0;
          const queries = await captureQueries(app.db, async () => {
            const res = await app.inject({
              method: s.method,
              url,
              headers: token ? { authorization: `Bearer ${token}`, 'content-type': 'application/json' } : {},
              payload: s.method === 'POST' ? POST_BODY : undefined,
            });
            status = res.statusCode;
          });
          if (status < 200 || status >= 300) throw new Error(`capturing the SQL of ${s.id}: ${url} answered ${status}`);
          const script = pgbenchScript(queries, {
            title: `${s.method} ${url} — ${s.title}${token ? ` (user ${k + 1} of ${ctx.tokens.length})` : ''}`,
            randomId: s.randomPostId ? { value: sampleId, range: ctx.postIds } : undefined,
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
  try {
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
    }, baselinePort);
    children.push(baseline);

    const ctx: Context = {
      big: bigService,
      bigUncached,
      small: smallService,
      baseline,
      tokens: await logIn(bigService, big),
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
      for (const s of SCENARIOS) await drive(s, ctx, PLAN.warmupSeconds);
    }
    const warmRss = memoryKb(bigService.pid, 'VmHWM');

    const http = new Map<string, Sample[]>();
    const db = new Map<string, PgbenchResult[]>();
    for (let round = 0; round < ROUNDS; round++) {
      // A different starting scenario each round, so no scenario always follows the same one.
      const order = SCENARIOS.map((_, k) => SCENARIOS[(k + round * 3) % SCENARIOS.length]!);
      for (const s of order) {
        // A target is a share of the ceiling: measured right before the scenario,
        // so the two see the same machine (its speed drifts by tens of percent).
        const paired = s.target === undefined ? undefined : await drive(CEILING, ctx, SECONDS);
        const sample = await drive(s, ctx, SECONDS);
        if (paired) sample.ceilingRps = paired.rps;
        http.set(s.id, [...(http.get(s.id) ?? []), sample]);
        let line = `round ${round + 1}/${ROUNDS} ${s.id.padEnd(16)} ${sample.rps.toFixed(0).padStart(6)} req/s  p50 ${sample.p50} ms  p99 ${sample.p99} ms  cpu ${sample.cpuMsPerRequest.toFixed(3)} ms/req`;
        if (sample.errors || sample.non2xx) line += `  ERRORS ${sample.errors} non-2xx ${sample.non2xx} ${JSON.stringify(sample.statusCodes)}`;
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
      scenarios: SCENARIOS,
      http,
      db,
      peakRssMb: peakRssKb / 1024,
      warmRssMb: warmRss / 1024,
      setupRssMb: setupRssKb / 1024,
      uncachedPeakRssMb: memoryKb(bigUncached.pid, 'VmHWM') / 1024,
      ctx: { author: ctx.author, popularPost: ctx.popularPost, deepCursor: ctx.deepCursor, secondCursor: ctx.secondCursor, deepPage: ctx.deepPage },
      machine: `${execFileSync('nproc').toString().trim()} cores, Node ${process.version}, ${server.source}`,
    };
    const file = SMOKE || flags.only || flags.rounds || flags['node-flags'] ? join(OUT, 'RESULTS.md') : join(ROOT, 'bench', 'RESULTS.md');
    const summary = await writeResults(file, outcome);
    for (const child of children.splice(0).reverse()) await child.stop();
    await cleanUp(big);
    log(`results written to ${file.slice(ROOT.length + 1)}`);
    console.log(summary.line);
    return summary.failedRequests > 0 ? 1 : 0;
  } finally {
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
