/**
 * The operator's path, run for real (issue #36 §2): docker-compose.yml on a Docker engine, as an
 * operator runs it (a .env with POSTGRES_PASSWORD only), then 2.1-2.8, each step printing what it
 * measured. Needs an engine with the images (`npm run stack:images` on a machine with no registry).
 *   npm run stack:check            (tsx deploy/stack-check.ts)
 * Load goes to 127.0.0.1:<published port> only, bounded in rate and time. Its own Compose project
 * (posts-api-stackcheck), always torn down with `down -v`. Exits 1 if a step failed.
 * STACK_STEPS=2.1,2.2,2.5 runs only those steps (and the teardown).
 * Environment beside POSTGRES_PASSWORD: API_PORT (a free port) and RATE_LIMIT_MAX, raised so that
 * the steady loads (one user, 100 req/s) are not rate-limited; 2.2 checks the sharing on the
 * default auth limit (RATE_LIMIT_AUTH_MAX=10).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, createWriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { troubleSummary } from '../test/helpers/processes.js';
import { differences, run as runWalkThrough, walkThrough } from '../test/helpers/walk-through.js';

const PROJECT = 'posts-api-stackcheck';
// Beyond a crash: what the api instances meet while it lasts (FATAL refusals, a shutdown, "not accepting").
const STACK_DB_TROUBLE =
  /PANIC|FATAL|terminated by signal|reinitializing|interrupted|recovery|shutting down|not accepting|out of memory/i;
const SCALE = ['scale'];
const ALL = ['scale', 'observability'];
const DEADLINE_MS = Number(process.env.STACK_CHECK_DEADLINE_S ?? 1500) * 1000;
const started = Date.now();
const work = mkdtempSync(join(tmpdir(), 'stack-check-'));
const envFile = join(work, '.env');
writeFileSync(envFile, `POSTGRES_PASSWORD=${'s' + Math.random().toString(36).slice(2, 14)}\n`);
let port = 0;
let promPort = 0;
let base = '';
let failures = 0;

type Result = { ok: boolean; text: string };
const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function sh(cmd: string, args: string[], opts: { input?: Buffer; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    const child = execFile(
      cmd,
      args,
      { env: opts.env ?? composeEnv(), timeout: opts.timeoutMs ?? 300_000, maxBuffer: 64 << 20, encoding: 'utf8' },
      (error, stdout, stderr) => resolve({ code: error ? ((error.code as number) ?? 1) : 0, stdout, stderr }),
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** `docker compose exec` of a shell command in the db container, its stdin and stdout the caller's. */
const inDb = (script: string) => [
  'compose',
  '-p',
  PROJECT,
  '--env-file',
  envFile,
  'exec',
  '-T',
  'db',
  'sh',
  '-c',
  script,
];

/** What Compose interpolates: only these, so a developer's shell or CI's variables do not leak in. */
function composeEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const keep = ['PATH', 'HOME', 'DOCKER_HOST', 'DOCKER_CONFIG', 'DOCKER_BUILDKIT'];
  const env: NodeJS.ProcessEnv = {};
  for (const k of keep) if (process.env[k] !== undefined) env[k] = process.env[k];
  return { ...env, API_PORT: String(port), PROMETHEUS_PORT: String(promPort), RATE_LIMIT_MAX: '1000000', ...extra };
}

async function compose(
  args: string[],
  opts: { timeoutMs?: number; env?: Record<string, string>; profiles?: string[] } = {},
) {
  const pre = [
    'compose',
    '-p',
    PROJECT,
    '--env-file',
    envFile,
    ...(opts.profiles ?? []).flatMap((p) => ['--profile', p]),
  ];
  const r = await sh('docker', [...pre, ...args], { timeoutMs: opts.timeoutMs, env: composeEnv(opts.env) });
  if (r.code !== 0)
    throw new Error(
      `docker compose ${args.join(' ')} failed (${r.code}): ${(r.stderr || r.stdout).trim().slice(-1500)}`,
    );
  return r.stdout;
}

interface Container {
  ID: string;
  Service: string;
  State: string;
  Health: string;
  Name: string;
}
async function containers(profiles: string[] = []): Promise<Container[]> {
  const out = await compose(['ps', '-a', '--format', 'json'], { profiles });
  const text = out.trim();
  if (text === '') return [];
  return text.startsWith('[')
    ? (JSON.parse(text) as Container[])
    : text.split('\n').map((l) => JSON.parse(l) as Container);
}

/** Every long-running service running and healthy (one-shot migrate exited 0), within a bound. */
async function waitHealthy(
  expect: Record<string, number>,
  timeoutMs: number,
  profiles: string[] = [],
): Promise<number> {
  const t0 = Date.now();
  let last = '';
  while (Date.now() - t0 < timeoutMs) {
    const list = await containers(profiles);
    const ok = Object.entries(expect).every(
      ([service, n]) =>
        list.filter(
          (c) => c.Service === service && c.State === 'running' && (c.Health === 'healthy' || c.Health === ''),
        ).length === n,
    );
    if (ok) return Date.now() - t0;
    last = list.map((c) => `${c.Service}:${c.State}/${c.Health || '-'}`).join(' ');
    await sleep(1000);
  }
  throw new Error(`not healthy within ${seconds(timeoutMs)}: ${last}`);
}

async function http(
  method: string,
  path: string,
  opts: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(base + path, {
    method,
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json: json as Record<string, unknown> };
}

/**
 * A steady load: `rps` requests a second for at least `ms`, and on until `during` (what is done
 * under the load) has finished, at most `10 * ms` in all (a busy host is slow to start replicas). A request fails on an error status or no
 * answer within 30 s (nginx's own bounds are below that: 1 s to connect, 10 s of retries).
 */
async function load(rps: number, ms: number, make: (i: number) => Promise<number>, during?: () => Promise<void>) {
  const counts = new Map<string, number>();
  const pending: Promise<void>[] = [];
  const t0 = Date.now();
  const failedAt: number[] = [];
  const took: number[] = [];
  let done = during === undefined;
  const side = during?.().finally(() => (done = true));
  side?.catch(() => {}); // awaited below: a failure there is the step's error, not an unhandled rejection
  for (let i = 0; Date.now() - t0 < ms || (!done && Date.now() - t0 < 10 * ms); i++) {
    const due = t0 + (i * 1000) / rps;
    if (due > Date.now()) await sleep(due - Date.now());
    const sent = Date.now();
    pending.push(
      make(i).then(
        (s) => {
          took.push(Date.now() - sent);
          counts.set(String(s), (counts.get(String(s)) ?? 0) + 1);
          if (s >= 400) failedAt.push(Date.now() - t0);
        },
        (e: Error) => {
          counts.set(e.name, (counts.get(e.name) ?? 0) + 1);
          failedAt.push(Date.now() - t0);
        },
      ),
    );
  }
  await Promise.all(pending);
  await side;
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const failed = [...counts.entries()].filter(([k]) => !/^[23]\d\d$/.test(k)).reduce((a, [, v]) => a + v, 0);
  const failedBetween = failedAt.length
    ? `${seconds(Math.min(...failedAt))} and ${seconds(Math.max(...failedAt))}`
    : '';
  took.sort((a, b) => a - b);
  const at = (q: number) => took[Math.min(took.length - 1, Math.floor(q * took.length))] ?? 0;
  const latency = `p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${took.at(-1) ?? 0} ms`;
  return {
    total,
    failed,
    failedBetween,
    latency,
    seconds: (Date.now() - t0) / 1000,
    counts: Object.fromEntries([...counts.entries()].sort()),
  };
}

const get = (path: string, token?: string) => () =>
  fetch(base + path, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
    signal: AbortSignal.timeout(30_000),
  }).then(async (r) => {
    await r.arrayBuffer();
    return r.status;
  });

/** One statement's rows in `service` (the primary, or the replica of the scale profile), as psql -At prints them. */
async function psql(sql: string, service = 'db', profiles?: string[]): Promise<string> {
  return (
    await compose(['exec', '-T', service, 'psql', '-U', 'posts', '-d', 'posts', '-Atc', sql], { profiles })
  ).trim();
}

async function walk(): Promise<Result> {
  const steps = walkThrough(readFileSync('README.md', 'utf8'));
  const outputs = await runWalkThrough(steps, port, '127.0.0.1');
  const problems = differences(steps, outputs);
  return {
    ok: problems.length === 0,
    text: `walk-through: ${steps.length} commands, ${problems.length} differences${problems.length ? `: ${problems.join('; ')}` : ''}`,
  };
}

async function login(email: string): Promise<string> {
  await http('POST', '/users', { body: { name: 'Load', email, password: 'correct horse' } });
  const r = await http('POST', '/tokens', { body: { email, password: 'correct horse' } });
  if (typeof r.json?.token !== 'string') throw new Error(`log-in failed: ${r.status} ${r.text}`);
  return r.json.token;
}

async function apiContainers(): Promise<Container[]> {
  return (await containers()).filter((c) => c.Service === 'api');
}

/** lb's access log since `since`: the requests nginx sent to more than one replica, by their upstreams' statuses. */
async function retried(since: string): Promise<string> {
  const logs = await compose(['logs', '--no-log-prefix', '--since', since, 'lb']);
  const tally = new Map<string, number>();
  for (const line of logs.split('\n')) {
    const m = /"status":(\d+),.*"upstream_status":"([^"]*,[^"]*)"/.exec(line);
    if (m) tally.set(`${m[2]} -> ${m[1]}`, (tally.get(`${m[2]} -> ${m[1]}`) ?? 0) + 1);
  }
  const n = [...tally.values()].reduce((a, b) => a + b, 0);
  // nginx's own reasons (error log: "upstream timed out", "connect() failed", "no live upstreams"),
  // counted by their text with addresses and numbers taken out.
  const reasons = new Map<string, number>();
  for (const line of logs.split('\n')) {
    const m = /\[(?:error|warn)\] \d+#\d+: \*\d+ ([^,]+(?:, [^,]*upstream: "[^"]*")?)/.exec(line);
    if (!m) continue;
    const reason = m[1]!.replace(/\d+\.\d+\.\d+\.\d+/g, 'IP').replace(/\(\d+: /, '(');
    reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
  }
  const said = [...reasons].sort((a, b) => b[1] - a[1]).slice(0, 5);
  return (
    `${n} retried by nginx${n ? ` (${[...tally].map(([k, v]) => `${v}x ${k}`).join('; ')})` : ''}` +
    (said.length ? `; nginx said: ${said.map(([k, v]) => `${v}x ${k}`).join('; ')}` : '')
  );
}

// ---------------------------------------------------------------------------------------------
const steps: [string, () => Promise<Result>][] = [];
let token = '';
let postId = 0;
// STACK_STEPS=2.1,2.2,2.5 runs those steps only (2.1 brings the stack up; a later one may need an earlier's scale).
const only = process.env.STACK_STEPS?.split(',').map((s) => s.trim());
const step = (name: string, fn: () => Promise<Result>) => {
  if (!only || only.some((n) => name.startsWith(`${n} `))) steps.push([name, fn]);
};

step('2.1 up --build: every service healthy; the README walk-through through lb', async () => {
  const t0 = Date.now();
  await compose(['up', '-d', '--build'], { timeoutMs: 900_000 });
  const built = Date.now() - t0;
  const waited = await waitHealthy({ db: 1, redis: 1, api: 1, lb: 1 }, 180_000);
  const w = await walk();
  return { ok: w.ok, text: `up --build ${seconds(built)}, healthy ${seconds(waited)} later; ${w.text}` };
});

step('2.2 --scale api=3: spread, shared rate limit, read-your-writes, edge cache bound', async () => {
  await compose(['up', '-d', '--no-recreate', '--scale', 'api=3'], { timeoutMs: 300_000 });
  const waited = await waitHealthy({ api: 3, lb: 1 }, 240_000);
  await sleep(6000); // nginx re-resolves "api" every 5 s
  token = await login('load@example.com');
  const since = new Date().toISOString();
  const spread = await load(50, 2000, get('/posts?perPage=5', token));
  const logs = await compose(['logs', '--no-log-prefix', '--since', since, 'lb']);
  const upstreams = new Map<string, number>();
  for (const line of logs.split('\n')) {
    const m = /"upstream_addr":"([^"]+)"/.exec(line);
    // "a:3000, b:3000" when nginx retried: b answered.
    const answered = m?.[1]?.split(', ').at(-1);
    if (answered && line.includes('perPage=5')) upstreams.set(answered, (upstreams.get(answered) ?? 0) + 1);
  }
  // The auth policy (10 a window per client): shared, the 11th in the window is refused whichever instance answers.
  const statuses: number[] = [];
  for (let i = 0; i < 14; i++)
    statuses.push(
      (await http('POST', '/tokens', { body: { email: 'nobody@example.com', password: 'wrong one' } })).status,
    );
  const allowed = statuses.filter((s) => s !== 429).length;
  // A write read at once through other instances, with the token.
  const created = await http('POST', '/posts', { token, body: { title: 'Through one', body: 'read through another' } });
  postId = Number(created.json?.id);
  const reads = await Promise.all([1, 2, 3, 4, 5, 6].map(() => http('GET', `/posts/${postId}`, { token })));
  const ryw = reads.every((r) => r.status === 200 && r.json?.title === 'Through one');
  // Anonymous: cached at the edge at most s-maxage; after a change, seen within that bound, plus the
  // replicas' lag bound of 1 s (docs/api.md §11) and 0.5 s for the polling and the request times.
  const first = await http('GET', `/posts/${postId}`);
  const cacheControl = first.headers.get('cache-control') ?? '';
  const bound = Number(/s-maxage=(\d+)/.exec(cacheControl)?.[1] ?? 0);
  const etag = (await http('GET', `/posts/${postId}`, { token })).headers.get('etag') ?? '';
  const patched = await http('PATCH', `/posts/${postId}`, {
    token,
    body: { title: 'Changed' },
    headers: { 'if-match': etag },
  });
  const t0 = Date.now();
  let seenAfter = -1;
  while (Date.now() - t0 < 10_000) {
    const r = await http('GET', `/posts/${postId}`);
    if (r.json?.title === 'Changed') {
      seenAfter = Date.now() - t0;
      break;
    }
    await sleep(100);
  }
  const ok =
    upstreams.size === 3 &&
    spread.failed === 0 &&
    allowed <= 10 &&
    statuses.includes(429) &&
    ryw &&
    patched.status === 200 &&
    seenAfter >= 0 &&
    seenAfter <= bound * 1000 + 1500;
  return {
    ok,
    text:
      `3 healthy ${seconds(waited)}; ${spread.total} authenticated reads over ${upstreams.size} instances (${[...upstreams.values()].join('/')}), ${spread.failed} failed (${JSON.stringify(spread.counts)}, ${spread.latency}); ` +
      `14 bad log-ins: ${allowed} answered, then 429 (shared limit 10); write read at once through 6 requests: ${ryw ? 'all saw it' : 'NOT all saw it'}; ` +
      `anonymous Cache-Control "${cacheControl}", change (PATCH ${patched.status}) seen anonymously after ${seenAfter} ms (bound ${bound} s)`,
  };
});

step('2.3 SIGKILL one api container under 100 req/s for 30 s', async () => {
  const victim = (await apiContainers())[0]!;
  const pid = (await sh('docker', ['inspect', '-f', '{{.State.Pid}}', victim.ID])).stdout.trim();
  let recovered = -1;
  let running = -1;
  const since = new Date().toISOString();
  const r = await load(100, 30_000, get(`/posts/${postId}`, token), async () => {
    await sleep(8000);
    const t0 = Date.now();
    process.kill(Number(pid), 'SIGKILL');
    while (Date.now() - t0 < 60_000) {
      const s = (
        await sh('docker', [
          'inspect',
          '-f',
          '{{.State.Running}} {{.RestartCount}} {{.State.Health.Status}}',
          victim.ID,
        ])
      ).stdout.trim();
      if (running < 0 && /^true [1-9]/.test(s)) running = Date.now() - t0;
      if (/^true [1-9]\d* healthy/.test(s)) {
        recovered = Date.now() - t0;
        break;
      }
      await sleep(250);
    }
  });
  return {
    ok: r.failed === 0 && recovered >= 0,
    text: `${r.total} requests, ${r.failed} failed (${JSON.stringify(r.counts)}; ${r.latency}), ${await retried(since)}; the killed container was restarted by Docker after ${seconds(running)} and healthy again after ${seconds(recovered)} (its healthcheck runs every 15 s)`,
  };
});

step('2.4 docker compose restart db under load', async () => {
  let firstWrite = -1;
  let restartTook = 0;
  const writes: number[] = [];
  const r = await load(
    100,
    30_000,
    (i) =>
      i % 10 === 0
        ? http('POST', '/posts', { token, body: { title: `w${i}`, body: 'x' } }).then(
            (x) => (writes.push(x.status), x.status),
          )
        : get(`/posts/${postId}`, token)(),
    async () => {
      await sleep(5000);
      const t0 = Date.now();
      await compose(['restart', 'db'], { timeoutMs: 120_000 });
      restartTook = Date.now() - t0;
      while (Date.now() - t0 < 60_000) {
        if (
          (
            await http('POST', '/posts', { token, body: { title: 'after restart', body: 'x' } }).catch(() => ({
              status: 0,
            }))
          ).status === 201
        ) {
          firstWrite = Date.now() - t0;
          break;
        }
        await sleep(200);
      }
    },
  );
  const bad = Object.keys(r.counts).filter((k) => k !== '200' && k !== '201' && k !== '503');
  return {
    ok: bad.length === 0 && firstWrite >= 0,
    text: `${r.total} requests: ${JSON.stringify(r.counts)} (500s: ${r.counts['500'] ?? 0}); restart took ${seconds(restartTook)}, first write accepted ${seconds(firstWrite)} after it began`,
  };
});

step('2.5 rolling upgrade to a changed image under load', async () => {
  const next = 'posts-api:stackcheck-next';
  const env = { API_IMAGE: next };
  // A changed image: the committed tree with one line more in the server's code, built from its Dockerfile
  // before the load (an operator builds, or pulls, first).
  const tree = join(work, 'next');
  mkdirSync(tree);
  const copied = await sh(
    'bash',
    [
      '-c',
      `git archive --format=tar HEAD | tar -x -C "${tree}" && echo '// the next version' >> "${tree}/src/server.ts"`,
    ],
    { env: process.env },
  );
  if (copied.code !== 0) throw new Error(`git archive: ${copied.stderr}`);
  const b0 = Date.now();
  const built = await sh('docker', ['build', '-q', '-t', next, tree], { env: process.env, timeoutMs: 900_000 });
  if (built.code !== 0) throw new Error(`docker build: ${built.stderr.slice(-1500)}`);
  const buildTook = Date.now() - b0;
  const imageOf = async (ref: string) => (await sh('docker', ['inspect', '-f', '{{.Image}}', ref])).stdout.trim();
  const old = (await apiContainers()).map((c) => c.ID);
  const oldImage = await imageOf(old[0]!);
  let text = '';
  const since = new Date().toISOString();
  const r = await load(100, 30_000, get(`/posts/${postId}`, token), async () => {
    await sleep(3000);
    const t0 = Date.now();
    // docs/operations.md, "Rolling upgrade": migrate while the old version still serves, new
    // replicas beside the old ones, then the old ones stopped (SIGTERM: drained) one by one, 6 s
    // apart: nginx holds a gone replica's address up to 5 s, and never more than one of them.
    await compose(['run', '--rm', 'migrate'], { env, timeoutMs: 300_000 });
    await compose(['up', '-d', '--no-deps', '--no-recreate', '--scale', 'api=6', 'api'], { env, timeoutMs: 300_000 });
    await waitHealthy({ api: 6 }, 240_000);
    await sleep(6000); // nginx re-resolves "api" every 5 s
    const up = Date.now() - t0;
    for (const id of old) {
      await sh('docker', ['stop', id], { timeoutMs: 60_000 });
      await sh('docker', ['rm', id]);
      await sleep(6000);
    }
    text = `migrate and 3 new replicas healthy in ${seconds(up)}, 3 old ones stopped one by one in ${seconds(Date.now() - t0 - up)}`;
  });
  const now = await Promise.all((await apiContainers()).map((c) => imageOf(c.ID)));
  const newImage = (await sh('docker', ['image', 'inspect', '-f', '{{.Id}}', next])).stdout.trim();
  const replaced = now.length === 3 && now.every((id) => id === newImage) && newImage !== oldImage;
  return {
    ok: r.failed === 0 && replaced,
    text:
      `changed image built in ${seconds(buildTook)} (before the load); ${r.total} requests in ${r.seconds.toFixed(0)} s, ${r.failed} failed ` +
      `(${JSON.stringify(r.counts)}; ${r.latency}${r.failed ? `, failures between ${r.failedBetween}` : ''}), ${await retried(since)}; ${text}; ` +
      `api: ${now.length} replicas of ${next} (${newImage.slice(7, 19)}, was ${oldImage.slice(7, 19)})`,
  };
});

const counts = () =>
  psql(
    "SELECT (SELECT count(*) FROM users) || ' users, ' || (SELECT count(*) FROM posts) || ' posts, ' || (SELECT count(*) FROM comments) || ' comments'",
  );

step('2.6 down and up keep the data; backup and restore (docs/operations.md)', async () => {
  const env = { API_IMAGE: 'posts-api:stackcheck-next' };
  const before = await counts();
  await compose(['down'], { env, timeoutMs: 120_000 });
  await compose(['up', '-d'], { env, timeoutMs: 300_000 });
  await waitHealthy({ db: 1, api: 1, lb: 1 }, 180_000);
  const after = await counts();
  const dump = join(work, 'backup.dump');
  const child = spawn('docker', inDb('pg_dump -U "$POSTGRES_USER" -d "$POSTGRES_DB" --format=custom'), {
    env: composeEnv(env),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
  await pipeline(child.stdout, createWriteStream(dump));
  const backup = await exited;
  await http('POST', '/posts', { token, body: { title: 'after the backup', body: 'gone after the restore' } });
  const beforeRestore = await counts();
  await compose(['stop', 'api'], { env });
  const restore = await sh(
    'docker',
    inDb('pg_restore -U "$POSTGRES_USER" -d "$POSTGRES_DB" --clean --if-exists --no-owner --single-transaction'),
    { input: readFileSync(dump), env: composeEnv(env) },
  );
  await compose(['up', '-d'], { env, timeoutMs: 300_000 });
  await waitHealthy({ db: 1, api: 1, lb: 1 }, 180_000);
  const restored = await counts();
  return {
    ok: before === after && backup === 0 && restore.code === 0 && restored === after && beforeRestore !== after,
    text: `before down: ${before}; after up: ${after}; backup (exit ${backup}); after one more post: ${beforeRestore}; restored (exit ${restore.code}${restore.code ? `: ${restore.stderr.trim().slice(-300)}` : ''}): ${restored}`,
  };
});

step('2.7 --profile scale: writes through PgBouncer, reads from the replica', async () => {
  await compose(['down', '-v'], { timeoutMs: 120_000 });
  await compose(['up', '-d', '--build'], { profiles: SCALE, timeoutMs: 600_000 });
  const waited = await waitHealthy({ db: 1, 'db-replica': 1, pgbouncer: 1, redis: 1, api: 1, lb: 1 }, 240_000, SCALE);
  const w = await walk();
  // Reads of posts, counted where they ran (a standby keeps its own scan statistics).
  const scans = async (service: string) =>
    Number(
      await psql(
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'posts'",
        service,
        SCALE,
      ),
    );
  // The walk-through just wrote: until the lag sampler (every 250 ms) sees the replica caught up, reads go to the
  // primary.
  await sleep(2_000);
  const [r0, p0] = [await scans('db-replica'), await scans('db')];
  // Cursor pages: offset pages read the primary (their snapshot must name what it committed).
  for (let i = 1; i <= 40; i++) await http('GET', `/posts?limit=${i}`);
  await sleep(11_000); // an idle backend flushes its statistics within 10 s
  const [r1, p1] = [await scans('db-replica'), await scans('db')];
  const ip = async (service: string) =>
    (
      await sh('docker', [
        'inspect',
        '-f',
        '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}',
        `${PROJECT}-${service}-1`,
      ])
    ).stdout
      .trim()
      .split(' ');
  const bouncer = await ip('pgbouncer');
  const rows = await psql(
    "SELECT host(client_addr) || ' ' || count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND client_addr IS NOT NULL GROUP BY host(client_addr)",
    'db',
    SCALE,
  );
  const fromBouncer = rows
    .split('\n')
    .filter((l) => bouncer.includes(l.split(' ')[0]!))
    .map((l) => Number(l.split(' ')[1]))
    .reduce((a, b) => a + b, 0);
  return {
    ok: w.ok && r1 - r0 >= 40 && fromBouncer > 0,
    text: `healthy ${seconds(waited)}; ${w.text}; 40 anonymous cursor pages: scans of posts on the replica +${r1 - r0}, on the primary +${p1 - p0}; primary's client sessions by address: ${rows.trim().replace(/\n/g, ', ')} (PgBouncer ${bouncer.join(' ')}: ${fromBouncer})`,
  };
});

step('2.9 --profile observability, --scale api=3: Prometheus scrapes every replica; its rules load', async () => {
  const profiles = [...ALL];
  const t0 = Date.now();
  await compose(['up', '-d', '--no-recreate', '--scale', 'api=3'], { profiles, timeoutMs: 300_000 });
  const waited = await waitHealthy({ api: 3, prometheus: 1, lb: 1 }, 180_000, profiles);
  const rules = (
    await compose(['exec', '-T', 'prometheus', 'promtool', 'check', 'rules', '/etc/prometheus/rules.yml'], { profiles })
  ).trim();
  token = await login('metrics@example.com');
  const reads = await load(20, 3000, get('/posts?perPage=2', token));
  const prom = async (path: string) => {
    const r = await fetch(`http://127.0.0.1:${promPort}${path}`, { signal: AbortSignal.timeout(10_000) });
    return ((await r.json()) as { data: any }).data; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  const query = async (q: string) =>
    Number((await prom(`/api/v1/query?query=${encodeURIComponent(q)}`)).result?.[0]?.value?.[1] ?? NaN);
  // DNS discovery and scrapes every 15 s: all three targets up, and the reads counted, within a minute.
  let up = 0;
  let counted = 0;
  let after = -1;
  const s0 = Date.now();
  while (Date.now() - s0 < 90_000) {
    up = await query('count(up{job="api"} == 1)').catch(() => NaN);
    counted = await query('sum(http_request_duration_seconds_count{method="GET",route="/posts"})').catch(() => NaN);
    if (up === 3 && counted >= reads.total) {
      after = Date.now() - s0;
      break;
    }
    await sleep(2000);
  }
  const targets = ((await prom('/api/v1/targets?state=active')).activeTargets ?? []) as {
    scrapeUrl: string;
    health: string;
  }[];
  const groups = ((await prom('/api/v1/rules')).groups ?? []) as { rules: unknown[] }[];
  const loaded = groups.reduce((a, g) => a + g.rules.length, 0);
  const rulesFound = Number(/SUCCESS: (\d+) rules found/.exec(rules)?.[1] ?? -1);
  return {
    ok:
      after >= 0 &&
      targets.length === 3 &&
      targets.every((t) => t.health === 'up') &&
      loaded === rulesFound &&
      loaded > 0,
    text:
      `3 api replicas and prometheus healthy ${seconds(waited)} after up (${seconds(Date.now() - t0)} in all); promtool check rules: ${rules.replace(/\s+/g, ' ')}; ` +
      `${reads.total} reads, ${reads.failed} failed; targets: ${targets.map((t) => `${t.scrapeUrl} ${t.health}`).join(', ')}; ` +
      `up == 1 for ${up} and ${counted} GET /posts counted ${seconds(after)} after the reads; ${loaded} rules loaded in ${groups.length} groups`,
  };
});

async function teardown(): Promise<Result> {
  await compose(['down', '-v', '--remove-orphans'], { profiles: ALL, timeoutMs: 180_000 }).catch(() => '');
  const label = `label=com.docker.compose.project=${PROJECT}`;
  const left = await Promise.all([
    sh('docker', ['ps', '-aq', '--filter', label]),
    sh('docker', ['network', 'ls', '-q', '--filter', label]),
    sh('docker', ['volume', 'ls', '-q', '--filter', label]),
  ]).then((rs) => rs.map((r) => r.stdout.trim().split('\n').filter(Boolean).length));
  await sh('docker', ['image', 'rm', 'posts-api:stackcheck-next']);
  return {
    ok: left.every((n) => n === 0),
    text: `down -v: ${left[0]} containers, ${left[1]} networks, ${left[2]} volumes left`,
  };
}

/** What the database logged since `t0` beyond routine lines (crashes, restarts, FATAL, PANIC, refusals). */
async function databaseTrouble(t0: number): Promise<string> {
  const since = new Date(t0).toISOString();
  const log = await compose(['logs', '--no-log-prefix', '--since', since, 'db']).catch((e: Error) => e.message);
  const lines = troubleSummary(log.split('\n'), STACK_DB_TROUBLE);
  return `    db log since the step began:${lines.length ? `\n      ${lines.join('\n      ')}` : ' nothing beyond routine lines'}`;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (a && typeof a === 'object' ? resolve(a.port) : reject(new Error('no port'))));
    });
  });
}

async function main(): Promise<void> {
  port = await freePort();
  promPort = await freePort();
  base = `http://127.0.0.1:${port}`;
  const watchdog = setTimeout(() => {
    console.log(`stack-check: deadline of ${seconds(DEADLINE_MS)} passed; tearing down`);
    void teardown().finally(() => process.exit(1));
  }, DEADLINE_MS);
  const stop = () => void teardown().finally(() => process.exit(130));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await compose(['down', '-v', '--remove-orphans'], { profiles: ALL }).catch(() => ''); // a previous run's leftovers
  let broken = false;
  for (const [name, fn] of steps) {
    const t0 = Date.now();
    let r: Result;
    if (broken) r = { ok: false, text: 'not run: an earlier step left the stack down' };
    else {
      try {
        r = await fn();
      } catch (error) {
        r = { ok: false, text: `error: ${(error as Error).message}` };
        broken = name.startsWith('2.1') || name.startsWith('2.6') || name.startsWith('2.7');
      }
    }
    if (!r.ok) failures++;
    console.log(`stack-check: ${r.ok ? 'ok' : 'FAILED'}: ${name} (${seconds(Date.now() - t0)})\n    ${r.text}`);
    // A failed step's cause is often the database's (seen: "in recovery mode" under load, its log gone with the stack).
    if (!r.ok && !broken) console.log(await databaseTrouble(t0));
  }
  const t0 = Date.now();
  const down = await teardown();
  if (!down.ok) failures++;
  console.log(
    `stack-check: ${down.ok ? 'ok' : 'FAILED'}: 2.8 everything torn down (${seconds(Date.now() - t0)})\n    ${down.text}`,
  );
  clearTimeout(watchdog);
  rmSync(work, { recursive: true, force: true });
  console.log(
    `stack-check: ${steps.length + 1 - failures} of ${steps.length + 1} steps ok in ${seconds(Date.now() - started)}`,
  );
  process.exit(failures === 0 ? 0 : 1);
}

void main();
