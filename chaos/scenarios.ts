/**
 * The fault scenarios. Each builds its own processes (clusters, instances,
 * proxies), runs a load, injects its fault, heals it, and returns what the
 * checker found; its processes are stopped when it ends, passed or not.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { checkWrites, figures, type Figures, type Verdict, type Window } from './check.js';
import {
  BOUND_MS,
  Load,
  now,
  request,
  retryKeyed,
  signUpClients,
  type Client,
  type Outcome,
  type Write,
} from './load.js';
import {
  Bouncer,
  Cluster,
  FaultProxy,
  log,
  makeAppDatabase,
  Redis,
  Service,
  smallFileSystem,
  sqlPool,
  waitFor,
} from './procs.js';

export interface Check {
  what: string;
  ok: boolean;
  detail?: string;
}

export interface Result {
  id: string;
  title: string;
  verdict?: Verdict;
  figures?: Figures;
  checks: Check[];
  /** What an operator saw: readiness, log lines. */
  seen: string[];
  notes: string[];
  error?: string;
}

export interface Plan {
  short: boolean;
}

const secs = (short: boolean, shortS: number, fullS: number) => (short ? shortS : fullS) * 1000;

/** Polls /health/ready of instances and records what it answered. */
class ReadinessMonitor {
  readonly samples: { instance: string; at: number; status: number }[] = [];
  private running = true;
  private loop: Promise<void>;
  constructor(private services: Service[]) {
    this.loop = (async () => {
      while (this.running) {
        await Promise.all(
          this.services.map(async (s) => {
            const at = now();
            const answer = await request(s.url, 'GET', '/health/ready', { timeoutMs: 5000 });
            this.samples.push({ instance: s.name, at, status: answer.status });
          }),
        );
        await sleep(250);
      }
    })();
  }
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
  /** e.g. "ready 200 → 503 (2.1 s) → 200". */
  summary(instance: string): string {
    const mine = this.samples.filter((s) => s.instance === instance);
    const runs = (key: (s: (typeof mine)[number]) => string) => {
      const out: { v: string; from: number; to: number }[] = [];
      for (const s of mine) {
        const v = key(s);
        const last = out.at(-1);
        if (last && last.v === v) last.to = s.at;
        else out.push({ v, from: s.at, to: s.at });
      }
      return out
        .map((r, i) =>
          i === 0 || i === out.length - 1 ? r.v : `${r.v} (${((r.to - r.from) / 1000 + 0.25).toFixed(1)} s)`,
        )
        .join(' → ');
    };
    return `${instance} /health/ready: ${runs((s) => (s.status <= 0 ? 'no answer' : String(s.status)))}`;
  }
}

/** Warning and error lines the service logged since `offset` (its own lines, not the access log), by message. */
function logLines(service: Service, offset: number): string[] {
  if (!existsSync(service.logFile)) return [];
  const text = readFileSync(service.logFile, 'utf8').slice(offset);
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    let entry: { level?: number; msg?: string; err?: { message?: string }; status?: number };
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    if ((entry.level ?? 0) < 40 || entry.msg === 'request failed') continue;
    const msg = `${entry.level === 40 ? 'warn' : entry.level === 50 ? 'error' : 'fatal'} "${entry.msg}"${entry.err?.message ? ` (${entry.err.message.slice(0, 80)})` : ''}`;
    counts.set(msg, (counts.get(msg) ?? 0) + 1);
  }
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([msg, n]) => `${service.name} log: ${n} × ${msg}`);
}
const logOffset = (service: Service) => (existsSync(service.logFile) ? statSync(service.logFile).size : 0);

/** Creates `n` posts through the service: the ones comments go to. */
async function seedPosts(base: string, client: Client, n: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await request(base, 'POST', '/posts', {
      token: client.token,
      body: { title: `seed ${i}`, body: 'seed' },
    });
    if (res.status !== 201) throw new Error(`seeding a post answered ${res.status}: ${res.message}`);
    ids.push((res.body as { id: number }).id);
  }
  return ids;
}

/** The checks every write scenario shares: nothing lost or made twice, no 500, no hang, keyed retries resolved, nothing half-made. */
function writeChecks(verdict: Verdict, fig: Figures): Check[] {
  const five00 = Object.entries(fig.errors).filter(([k]) => !k.startsWith('503'));
  return [
    { what: 'no acknowledged write lost', ok: verdict.lost.length === 0, detail: verdict.lost.slice(0, 5).join('; ') },
    {
      what: 'no write in the database twice',
      ok: verdict.duplicated.length === 0,
      detail: verdict.duplicated.slice(0, 5).join('; '),
    },
    {
      what: 'every 5xx is a 503 (no 500)',
      ok: five00.length === 0,
      detail: five00.map(([k, n]) => `${n} × ${k}`).join('; '),
    },
    {
      what: `every request answered within ${BOUND_MS} ms`,
      ok: fig.overBound === 0,
      detail: `${fig.overBound} over, slowest ${Math.round(fig.slowest)} ms`,
    },
    {
      what: 'every unacknowledged keyed write resolved by a retry with its key',
      ok: verdict.retryFailures.length === 0,
      detail: verdict.retryFailures.slice(0, 5).join('; '),
    },
    {
      what: "no post's comment total disagrees with its comments",
      ok: verdict.halfMade === 0,
      detail: `${verdict.halfMade} posts`,
    },
  ];
}

/** Where PostgreSQL stays up, a 503 must not say it is unreachable (docs/api.md §2: each message says what happened). */
function saysUpWhenUp(result: Result): Check {
  const wrong = Object.entries(result.figures!.errors).filter(([k]) => k.includes('unreachable'));
  return {
    what: 'no 503 says the database is unreachable while it is up',
    ok: wrong.length === 0,
    detail: wrong.map(([k, n]) => `${n} × ${k}`).join('; '),
  };
}

async function finish(
  result: Result,
  db: pg.Pool,
  label: string,
  load: Load,
  clients: Client[],
  retryBase: (w: Write) => string,
  window: Window | undefined,
  extra: Outcome[] = [],
): Promise<void> {
  log(`  ${load.writes.length} writes sent; retrying the unacknowledged keyed ones, then checking`);
  await retryKeyed(load.writes, clients, retryBase);
  result.verdict = await checkWrites(db, label, load.writes);
  result.figures = figures([...load.writes, ...load.reads, ...extra], load.writes, window);
  result.checks.push(...writeChecks(result.verdict, result.figures));
}

// ------------------------------------------------------------------ 1

export async function databaseCrash(plan: Plan): Promise<Result> {
  const result: Result = {
    id: '1',
    title: 'PostgreSQL killed (kill -9 of the postmaster) under group-committed writes, restarted',
    checks: [],
    seen: [],
    notes: [],
  };
  const cluster = await Cluster.create('s1');
  const url = await makeAppDatabase(cluster, 'chaos');
  const service = await Service.start('s1-service', { databaseUrl: url });
  const pid = service.pid;
  const clients = await signUpClients(service.url, 8, 's1');
  const posts = await seedPosts(service.url, clients[0]!, 20);
  const label = `s1x${Date.now().toString(36)}`;
  const monitor = new ReadinessMonitor([service]);
  const offset = logOffset(service);
  const load = new Load({
    label,
    clients,
    writers: 32,
    target: () => ({ name: service.name, url: service.url }),
    posts,
    keyed: 0.5,
  });
  const total = secs(plan.short, 10, 20);
  await sleep(total * 0.4);
  const fault = now();
  await cluster.kill9();
  await sleep(secs(plan.short, 2, 4));
  await cluster.start();
  const healed = now();
  result.notes.push(
    `PostgreSQL down ${((healed - fault) / 1000).toFixed(1)} s (kill -9 at ${(fault / 1000).toFixed(1)} s, accepting queries again at ${(healed / 1000).toFixed(1)} s, crash recovery included)`,
  );
  await sleep(Math.max(secs(plan.short, 4, 8), total * 0.6 - (healed - fault)));
  await load.stop();
  await monitor.stop();
  await finish(result, sqlPool(cluster.url('chaos')), label, load, clients, () => service.url, { fault, healed });
  const down = load.writes.filter((w) => w.start >= fault && w.end <= healed);
  result.checks.push(
    {
      what: 'answered 503 while PostgreSQL was down',
      ok: down.some((w) => w.status === 503),
      detail: `${down.filter((w) => w.status === 503).length} of ${down.length} writes sent and answered while down`,
    },
    {
      what: 'served again within 2 s of the database accepting queries',
      ok: (result.figures!.recoveryS ?? Infinity) <= 2,
      detail: `${result.figures!.recoveryS?.toFixed(2)} s`,
    },
    { what: 'no restart of the service', ok: service.pid === pid, detail: `pid ${pid} → ${service.pid}` },
  );
  result.seen.push(monitor.summary(service.name), ...logLines(service, offset));
  return result;
}

// ------------------------------------------------------------------ 2

export async function serviceCrash(plan: Plan): Promise<Result> {
  const result: Result = {
    id: '2',
    title: 'One of two instances killed (kill -9) under writes, restarted',
    checks: [],
    seen: [],
    notes: [],
  };
  const cluster = await Cluster.create('s2');
  const url = await makeAppDatabase(cluster, 'chaos');
  const a = await Service.start('s2-a', { databaseUrl: url });
  const b = await Service.start('s2-b', { databaseUrl: url });
  const clients = await signUpClients(b.url, 8, 's2');
  const posts = await seedPosts(b.url, clients[0]!, 20);
  const label = `s2x${Date.now().toString(36)}`;
  const offset = logOffset(b);
  let aUp = true;
  // A load balancer's view: writers alternate between the instances; none is sent to a dead one.
  const load = new Load({
    label,
    clients,
    writers: 32,
    readers: 4,
    target: (i) => (i % 2 === 0 && aUp ? { name: a.name, url: a.url } : { name: b.name, url: b.url }),
    posts,
    keyed: 0.5,
  });
  const total = secs(plan.short, 6, 20);
  await sleep(total * 0.4);
  const fault = now();
  await a.kill9();
  aUp = false;
  const inFlight = load.writes.length;
  await sleep(secs(plan.short, 1, 3));
  await a.start();
  aUp = true;
  const healed = now();
  await sleep(Math.max(0, total * 0.6 - (healed - fault)));
  await load.stop();
  result.notes.push(
    `instance a killed at ${(fault / 1000).toFixed(1)} s, started again and ready at ${(healed / 1000).toFixed(1)} s`,
  );
  const db = sqlPool(cluster.url('chaos'));
  const cutOff = load.writes.filter((w) => w.instance === a.name && w.status === 0);
  result.notes.push(
    `${cutOff.length} writes to a were cut off by the kill (${cutOff.filter((w) => w.key).length} with a key); ${inFlight} writes answered before it`,
  );
  await finish(result, db, label, load, clients, () => b.url, { fault, healed });

  // The survivor's answers, and the restarted instance's, against the database once the writes stopped.
  const compare = async (service: Service) => {
    const { rows } = await db.query<{ id: number; title: string; comment_count: number }>(
      `SELECT id::int, title, COALESCE((SELECT n FROM comment_counts WHERE post_id = posts.id), 0)::int AS comment_count
       FROM posts WHERE id = ANY($1)`,
      [posts],
    );
    let stale = 0;
    for (const row of rows) {
      const res = await request(service.url, 'GET', `/posts/${row.id}`);
      const body = res.body as { title: string; commentCount: number };
      if (res.status !== 200 || body.title !== row.title || body.commentCount !== row.comment_count) stale += 1;
    }
    const { rows: top } = await db.query<{ id: number }>('SELECT id::int FROM posts ORDER BY id DESC LIMIT 20');
    const page = await request(service.url, 'GET', '/posts?perPage=20&sort=-id');
    const ids = ((page.body as { data: { id: number }[] }).data ?? []).map((p) => p.id);
    if (ids.join() !== top.map((r) => r.id).join()) stale += 1;
    return stale;
  };
  const staleAtOnce = await compare(b);
  await sleep(6000);
  const staleLater = await compare(b);
  const staleRestarted = await compare(a);
  result.checks.push(
    {
      what: "the survivor's answers agree with the database once writes stopped",
      ok: staleAtOnce === 0,
      detail: `${staleAtOnce} of ${posts.length + 1} reads stale at once, ${staleLater} after the 5 s max age`,
    },
    {
      what: "the restarted instance's answers agree with the database",
      ok: staleRestarted === 0,
      detail: `${staleRestarted} stale`,
    },
    {
      what: 'in-flight keyed writes cut off by the kill resolved by a retry on the other instance',
      ok: cutOff.filter((w) => w.key).every((w) => w.retriedId !== undefined),
      detail: `${cutOff.filter((w) => w.key && w.replayed).length} replayed, ${cutOff.filter((w) => w.key && w.retriedId !== undefined && !w.replayed).length} created by the retry`,
    },
  );
  result.seen.push(...logLines(b, offset));
  return result;
}

// ------------------------------------------------------------------ 5

interface ExhaustionSetup {
  cluster: Cluster;
  service: Service;
  clients: Client[];
  posts: number[];
  db: pg.Pool;
  wal: Awaited<ReturnType<typeof smallFileSystem>>;
}

async function exhaustionPhase(
  s: ExhaustionSetup,
  plan: Plan,
  id: string,
  title: string,
  inject: () => Promise<void>,
  heal: () => Promise<void>,
  holdMs: number,
  {
    databaseUp = true,
    writers = 16,
    more,
  }: { databaseUp?: boolean; writers?: number; more?: (result: Result, load: Load, window: Window) => void } = {},
): Promise<Result> {
  const result: Result = { id, title, checks: [], seen: [], notes: [] };
  const label = `s${id}x${Date.now().toString(36)}`;
  const pid = s.service.pid;
  const monitor = new ReadinessMonitor([s.service]);
  const offset = logOffset(s.service);
  const target = () => ({ name: s.service.name, url: s.service.url });
  const load = new Load({ label, clients: s.clients, writers, readers: 8, target, posts: [...s.posts], keyed: 0.5 });
  await sleep(secs(plan.short, 2, 5));
  const fault = now();
  await inject();
  await sleep(holdMs);
  await heal();
  const healed = now();
  await sleep(secs(plan.short, 3, 8));
  await load.stop();
  await monitor.stop();
  await finish(result, s.db, label, load, s.clients, () => s.service.url, { fault, healed });
  const during = load.reads.filter((r) => r.start >= fault && r.end <= healed);
  result.notes.push(
    `fault held ${((healed - fault) / 1000).toFixed(1)} s; reads during it: ${during.filter((r) => r.status === 200).length} of ${during.length} answered 200`,
  );
  result.checks.push(
    {
      what: 'served again within 2 s of the fault healing',
      ok: (result.figures!.recoveryS ?? Infinity) <= 2,
      detail: `${result.figures!.recoveryS?.toFixed(2)} s`,
    },
    { what: 'no restart of the service', ok: s.service.pid === pid },
  );
  more?.(result, load, { fault, healed });
  if (databaseUp) result.checks.push(saysUpWhenUp(result));
  result.seen.push(monitor.summary(s.service.name), ...logLines(s.service, offset));
  return result;
}

export async function exhaustion(plan: Plan): Promise<Result[]> {
  const wal = await smallFileSystem('s5-wal', 96);
  const cluster = await Cluster.create('s5', {
    maxConnections: 40,
    walDir: `${wal.path}/pg_wal`,
    walSegmentMb: 1,
    conf: ['min_wal_size = 4MB', 'max_wal_size = 16MB'],
  });
  const url = await makeAppDatabase(cluster, 'chaos');
  const service = await Service.start('s5-service', { databaseUrl: url });
  const clients = await signUpClients(service.url, 8, 's5');
  const posts = await seedPosts(service.url, clients[0]!, 20);
  const db = sqlPool(cluster.url('chaos'), 2);
  const s: ExhaustionSetup = { cluster, service, clients, posts, db, wal };
  const results: Result[] = [];
  const hold = secs(plan.short, 3, 10);

  // 5a: another client holds every connection slot; the service's own connections are dropped (as after a blip).
  const hogs: pg.Client[] = [];
  results.push(
    await exhaustionPhase(
      s,
      plan,
      '5a',
      'max_connections reached by another client (the service’s connections dropped meanwhile)',
      async () => {
        const grab = async () => {
          for (;;) {
            const client = new pg.Client({ connectionString: cluster.url('chaos', 'hog') });
            client.on('error', () => undefined);
            try {
              await client.connect();
              hogs.push(client);
            } catch {
              return;
            }
          }
        };
        await grab();
        await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'posts-api'`);
        await grab();
      },
      async () => {
        await Promise.all(hogs.splice(0).map((c) => c.end().catch(() => undefined)));
      },
      hold,
      { databaseUp: false },
    ),
  );
  results
    .at(-1)!
    .notes.push(`max_connections = 40; the other client held ${40 - 3} (all but the superuser-reserved slots)`);

  // 5b: a transaction holds a lock every comment insert waits for: comment writes run into the statement timeout and hold the pool.
  let locker: pg.Client | undefined;
  results.push(
    await exhaustionPhase(
      s,
      plan,
      '5b',
      'pool saturated by slow statements (comments locked by another transaction)',
      async () => {
        locker = new pg.Client({ connectionString: cluster.url('chaos') });
        locker.on('error', () => undefined);
        await locker.connect();
        await locker.query('BEGIN');
        await locker.query('LOCK TABLE comments IN SHARE ROW EXCLUSIVE MODE');
      },
      async () => {
        await locker?.query('ROLLBACK').catch(() => undefined);
        await locker?.end().catch(() => undefined);
      },
      hold,
      { writers: 32 },
    ),
  );

  // 5d: one post's row locked by another transaction: only the writes to that post may wait.
  const hot = posts[0]!;
  results.push(
    await exhaustionPhase(
      s,
      plan,
      '5d',
      `one row locked by another transaction (post ${hot} FOR UPDATE)`,
      async () => {
        locker = new pg.Client({ connectionString: cluster.url('chaos') });
        locker.on('error', () => undefined);
        await locker.connect();
        await locker.query('BEGIN');
        await locker.query('SELECT 1 FROM posts WHERE id = $1 FOR UPDATE', [hot]);
      },
      async () => {
        await locker?.query('ROLLBACK').catch(() => undefined);
        await locker?.end().catch(() => undefined);
      },
      hold,
      {
        more: (result, load, window) => {
          const others = load.writes.filter(
            (w) => w.start >= window.fault && w.start < window.healed && w.postId !== hot,
          );
          const failed = others.filter((w) => w.status !== 201);
          const slow = others.filter((w) => w.end - w.start > 1000);
          result.checks.push({
            what: 'writes not touching the locked row go on (none fails, none waits a second)',
            ok: failed.length === 0 && slow.length === 0,
            detail: `${failed.length} failed, ${slow.length} took over 1 s, of ${others.length} sent while it was locked`,
          });
        },
      },
    ),
  );

  // 5c: pg_wal fills up (a replication slot nobody reads keeps all WAL; another writer bulk-loads).
  const filler = cluster.url('chaos');
  let crashed = false;
  results.push(
    await exhaustionPhase(
      s,
      plan,
      '5c',
      'disk full for the WAL (a forgotten replication slot, a bulk load)',
      async () => {
        await cluster.psql(`SELECT pg_create_physical_replication_slot('chaos_forgotten', true)`);
        await cluster.psql('CREATE TABLE IF NOT EXISTS chaos_filler (b text)', 'chaos');
        const client = new pg.Client({ connectionString: filler });
        client.on('error', () => undefined);
        await client.connect();
        try {
          for (let i = 0; i < 200; i++)
            await client.query(
              `INSERT INTO chaos_filler SELECT repeat(md5(random()::text), 64) FROM generate_series(1, 4000)`,
            );
        } catch {
          // No space left: PostgreSQL refuses (or panics and restarts).
        }
        await client.end().catch(() => undefined);
      },
      async () => {
        // The operator's remedy: room for the WAL, then the slot and the bulk data dropped.
        await wal.grow(512);
        // A postmaster seen alive may still be on its way out: its crash recovery found no room before the remount.
        await waitFor(
          'PostgreSQL accepts queries, or its postmaster has stopped',
          async () => cluster.postmasterPid() === undefined || (await cluster.ready()),
          60_000,
        );
        if (cluster.postmasterPid() === undefined) {
          crashed = true;
          await cluster.start();
        }
        await cluster.psql(`SELECT pg_drop_replication_slot('chaos_forgotten')`);
        await cluster.psql('DROP TABLE chaos_filler', 'chaos');
        await cluster.psql('CHECKPOINT');
      },
      hold,
      { databaseUp: false },
    ),
  );
  results
    .at(-1)!
    .notes.push(
      crashed
        ? 'PostgreSQL stopped when pg_wal filled (PANIC, then its crash recovery found no room): started again by hand after the remount'
        : 'PostgreSQL stayed up (or restarted by itself) when pg_wal filled',
    );
  const log = readFileSync(cluster.log, 'utf8');
  const panic = log.match(/PANIC: .*/)?.[0];
  if (panic) results.at(-1)!.seen.push(`PostgreSQL log: ${panic.slice(0, 140)}`);
  return results;
}

// ------------------------------------------------------------------ 3

export async function failover(plan: Plan, synchronous: boolean): Promise<Result> {
  const id = synchronous ? '3a' : '3b';
  const result: Result = {
    id,
    title: `primary killed, ${synchronous ? 'synchronous' : 'asynchronous'} replica promoted, PgBouncer pointed at it and reloaded`,
    checks: [],
    seen: [],
    notes: [],
  };
  const name = `s${id}`;
  const primary = await Cluster.create(`${name}-primary`);
  const url = await makeAppDatabase(primary, 'chaos');
  const standby = await primary.replica(`${name}-standby`);
  const other = await primary.replica(`${name}-other`);
  if (synchronous) {
    await primary.psql(`ALTER SYSTEM SET synchronous_standby_names = '"${name}-standby"'`);
    await primary.psql('SELECT pg_reload_conf()');
  }
  const bouncer = await Bouncer.start(`${name}-pgbouncer`, primary.port, ['chaos']);
  const service = await Service.start(`${name}-service`, {
    databaseUrl: bouncer.url('chaos'),
    // LISTEN through a session-mode entry of the same PgBouncer, so it follows the failover too.
    listenUrl: bouncer.url('chaos_session'),
    readUrls: [standby.url('chaos', 'app'), other.url('chaos', 'app')],
  });
  void url;
  const pid = service.pid;
  const clients = await signUpClients(service.url, 8, name);
  const posts = await seedPosts(service.url, clients[0]!, 20);
  const label = `${name}x${Date.now().toString(36)}`;
  const monitor = new ReadinessMonitor([service]);
  const offset = logOffset(service);
  const load = new Load({
    label,
    clients,
    writers: 32,
    readers: 4,
    target: () => ({ name: service.name, url: service.url }),
    posts,
    keyed: 0.5,
  });
  const total = secs(plan.short, 8, 20);
  await sleep(total * 0.4);
  log('  load running; killing the primary');
  const fault = now();
  await primary.kill9();
  // An operator's (or a failover manager's) reaction time.
  await sleep(1000);
  await standby.promote();
  await bouncer.retarget(standby.port);
  const healed = now();
  log('  standby promoted, PgBouncer reloaded');
  result.notes.push(
    `primary killed at ${(fault / 1000).toFixed(1)} s; standby promoted and PgBouncer reloaded at ${(healed / 1000).toFixed(1)} s`,
  );
  await sleep(Math.max(0, total * 0.6 - (healed - fault)));
  await load.stop();
  await monitor.stop();
  const db = sqlPool(standby.url('chaos'));
  await finish(result, db, label, load, clients, () => service.url, { fault, healed });

  // Nothing older than the promotion: every post acknowledged after it is read back by anyone, the newest list matches the database.
  await sleep(1500);
  const after = load.writes.filter((w) => w.kind === 'post' && w.status === 201 && w.start > healed).slice(-100);
  let missing = 0;
  for (const w of after) if ((await request(service.url, 'GET', `/posts/${w.id}`)).status !== 200) missing += 1;
  const { rows: top } = await db.query<{ id: number }>('SELECT id::int FROM posts ORDER BY id DESC LIMIT 20');
  const page = await request(service.url, 'GET', '/posts?perPage=20&sort=-id');
  const ids = ((page.body as { data?: { id: number }[] }).data ?? []).map((p) => p.id);
  result.checks.push(
    {
      what: 'the service served again without a restart',
      ok: service.pid === pid && result.figures!.recoveryS !== undefined,
      detail: `recovery ${result.figures!.recoveryS?.toFixed(2)} s after the reload`,
    },
    {
      what: 'anonymous reads after the promotion show every post created after it',
      ok: missing === 0,
      detail: `${missing} of ${after.length} not found`,
    },
    {
      what: 'the newest page (replicas) matches the new primary',
      ok: ids.join() === top.map((r) => r.id).join(),
    },
  );
  if (!synchronous) {
    // Lost acknowledged writes are the asynchronous replica's documented price: counted, not failed.
    const lost = result.checks.find((c) => c.what === 'no acknowledged write lost')!;
    lost.ok = true;
    lost.what = 'acknowledged writes lost with an asynchronous replica (counted, expected possible)';
    lost.detail = `${result.verdict!.lost.length} lost`;
  }
  result.seen.push(monitor.summary(service.name), ...logLines(service, offset));
  return result;
}

// ------------------------------------------------------------------ 4

/**
 * Reads of a few posts on one instance while another instance renames them:
 * the longest a read answered an older title after a newer one was acknowledged.
 */
class StalenessProbe {
  private acked = new Map<number, { version: number; at: number }[]>();
  readonly reads: Outcome[] = [];
  readonly writes: Outcome[] = [];
  maxStaleMs = 0;
  private running = true;
  private loops: Promise<void>[];
  constructor(writer: Service, reader: Service, token: string, posts: number[]) {
    for (const p of posts) this.acked.set(p, [{ version: 0, at: 0 }]);
    this.loops = [
      (async () => {
        let version = 0;
        while (this.running) {
          version += 1;
          const post = posts[version % posts.length]!;
          const start = now();
          const res = await request(writer.url, 'PATCH', `/posts/${post}`, { token, body: { title: `v${version}` } });
          this.writes.push({
            method: 'PATCH',
            route: '/posts/{id}',
            instance: writer.name,
            status: res.status,
            start,
            end: now(),
            ...(res.message !== undefined && { message: res.message }),
          });
          if (res.status === 200) this.acked.get(post)!.push({ version, at: now() });
          await sleep(100);
        }
      })(),
      ...[0, 1].map(async () => {
        while (this.running) {
          const post = posts[Math.floor(Math.random() * posts.length)]!;
          const start = now();
          const res = await request(reader.url, 'GET', `/posts/${post}`);
          this.reads.push({
            method: 'GET',
            route: '/posts/{id}',
            instance: reader.name,
            status: res.status,
            start,
            end: now(),
            ...(res.message !== undefined && { message: res.message }),
          });
          if (res.status !== 200) continue;
          const seen = Number((res.body as { title: string }).title.replace(/^v/, '')) || 0;
          // The first acknowledged version newer than the one read: stale since its acknowledgement.
          const newer = this.acked.get(post)!.find((a) => a.version > seen && a.at < start);
          if (newer) this.maxStaleMs = Math.max(this.maxStaleMs, start - newer.at);
          await sleep(20);
        }
      }),
    ];
  }
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }
}

export async function network(plan: Plan, netem: boolean): Promise<Result[]> {
  const cluster = await Cluster.create('s4');
  const url = await makeAppDatabase(cluster, 'chaos');
  const redis = await Redis.start();
  const pgProxy = await FaultProxy.start(cluster.port);
  const listenProxy = await FaultProxy.start(cluster.port);
  const redisProxy = await FaultProxy.start(redis.port);
  const viaProxy = (port: number) => url.replace(`:${cluster.port}/`, `:${port}/`);
  const a = await Service.start('s4-a', {
    databaseUrl: viaProxy(pgProxy.port),
    listenUrl: url,
    redisUrl: `redis://127.0.0.1:${redisProxy.port}`,
  });
  const b = await Service.start('s4-b', {
    databaseUrl: viaProxy(pgProxy.port),
    listenUrl: viaProxy(listenProxy.port),
    redisUrl: `redis://127.0.0.1:${redisProxy.port}`,
  });
  const clients = await signUpClients(a.url, 8, 's4');
  const posts = await seedPosts(a.url, clients[0]!, 20);
  const probed = await seedPosts(a.url, clients[1]!, 8);
  const db = sqlPool(cluster.url('chaos'));
  const how = netem ? 'tc netem' : 'a userspace TCP proxy (this kernel has no netem)';
  const phases: {
    id: string;
    title: string;
    proxy: FaultProxy;
    impairment: { delayMs?: number; loss?: number; blackhole?: boolean };
  }[] = [
    {
      id: '4a',
      title: 'service ↔ PostgreSQL: 100 ms round trip, 2 % loss',
      proxy: pgProxy,
      impairment: { delayMs: 50, loss: 0.02 },
    },
    {
      id: '4b',
      title: 'service ↔ Redis (rate limiter): 100 ms round trip, 2 % loss',
      proxy: redisProxy,
      impairment: { delayMs: 50, loss: 0.02 },
    },
    {
      id: '4c',
      title: "instance b's LISTEN connection partitioned (black hole)",
      proxy: listenProxy,
      impairment: { blackhole: true },
    },
  ];
  const results: Result[] = [];
  for (const phase of phases) {
    const result: Result = { id: phase.id, title: phase.title, checks: [], seen: [], notes: [`impaired by ${how}`] };
    const label = `s${phase.id}x${Date.now().toString(36)}`;
    const monitor = new ReadinessMonitor([a, b]);
    const offsets = [logOffset(a), logOffset(b)];
    const load = new Load({
      label,
      clients,
      writers: 16,
      readers: 8,
      target: (i) => (i % 2 ? { name: a.name, url: a.url } : { name: b.name, url: b.url }),
      posts: [...posts],
      keyed: 0.5,
    });
    const probe = new StalenessProbe(a, b, clients[1]!.token, probed);
    await sleep(secs(plan.short, 2, 5));
    const fault = now();
    phase.proxy.set(phase.impairment);
    await sleep(secs(plan.short, 5, 30));
    phase.proxy.set({});
    const healed = now();
    await sleep(secs(plan.short, 3, 5));
    await load.stop();
    await probe.stop();
    await monitor.stop();
    await finish(result, db, label, load, clients, () => a.url, { fault, healed }, [...probe.reads, ...probe.writes]);
    const limited = [...load.writes, ...load.reads].filter((o) => o.status === 429).length;
    result.checks.push(
      {
        what: 'no read of another instance older than the write (2 s after its acknowledgement at most)',
        ok: probe.maxStaleMs <= 2500,
        detail: `stalest read ${Math.round(probe.maxStaleMs)} ms after a newer title was acknowledged`,
      },
      {
        what: 'the rate limiter fails open (no 429, no 5xx from Redis)',
        ok: limited === 0,
        detail: `${limited} × 429`,
      },
      saysUpWhenUp(result),
    );
    result.seen.push(
      monitor.summary(a.name),
      monitor.summary(b.name),
      ...logLines(a, offsets[0]!),
      ...logLines(b, offsets[1]!),
    );
    results.push(result);
  }
  return results;
}

// ------------------------------------------------------------------ 6

export async function soak(plan: Plan): Promise<Result> {
  const result: Result = {
    id: '6',
    title: `soak: ${plan.short ? 1 : 10} min of mixed load, a fault every ${plan.short ? 10 : 60} s`,
    checks: [],
    seen: [],
    notes: [],
  };
  const cluster = await Cluster.create('s6', { maxConnections: 60 });
  const url = await makeAppDatabase(cluster, 'chaos');
  const redis = await Redis.start();
  const listenProxy = await FaultProxy.start(cluster.port);
  const a = await Service.start('s6-a', { databaseUrl: url, redisUrl: redis.url });
  const b = await Service.start('s6-b', {
    databaseUrl: url,
    listenUrl: url.replace(`:${cluster.port}/`, `:${listenProxy.port}/`),
    redisUrl: redis.url,
  });
  const pidA = a.pid;
  const clients = await signUpClients(a.url, 8, 's6');
  const posts = await seedPosts(a.url, clients[0]!, 20);
  const db = sqlPool(cluster.url('chaos'), 2);
  const label = `s6x${Date.now().toString(36)}`;
  let bUp = true;
  const load = new Load({
    label,
    clients,
    writers: 16,
    readers: 8,
    target: (i) => (i % 2 === 0 || !bUp ? { name: a.name, url: a.url } : { name: b.name, url: b.url }),
    posts,
    keyed: 0.5,
  });
  const connections = async () =>
    (
      await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'posts-api%'`,
      )
    ).rows[0]!.n;
  await sleep(5000);
  const start = { rssKb: a.rssKb(), fds: a.openFds(), connections: await connections() };
  const hold = 3000;
  const faults: [string, () => Promise<void>][] = [
    [
      'PostgreSQL kill -9, restarted after 2 s',
      async () => (await cluster.kill9(), await sleep(2000), void (await cluster.start())),
    ],
    [
      'instance b kill -9, restarted',
      async () => {
        bUp = false;
        await b.kill9();
        await sleep(1000);
        await b.start();
        bUp = true;
      },
    ],
    [
      'comments locked 3 s (pool saturated)',
      async () => {
        const locker = new pg.Client({ connectionString: cluster.url('chaos') });
        await locker.connect();
        await locker.query('BEGIN; LOCK TABLE comments IN SHARE ROW EXCLUSIVE MODE');
        await sleep(hold);
        await locker.query('ROLLBACK');
        await locker.end();
      },
    ],
    ['Redis kill -9, restarted after 3 s', async () => (await redis.kill(), await sleep(hold), await redis.start())],
    [
      "instance b's LISTEN partitioned 3 s",
      async () => (listenProxy.set({ blackhole: true }), await sleep(hold), listenProxy.set({})),
    ],
    [
      'connection slots taken by another client 3 s',
      async () => {
        const hogs: pg.Client[] = [];
        for (;;) {
          const c = new pg.Client({ connectionString: cluster.url('chaos', 'hog') });
          c.on('error', () => undefined);
          try {
            await c.connect();
            hogs.push(c);
          } catch {
            break;
          }
        }
        await sleep(hold);
        await Promise.all(hogs.map((c) => c.end().catch(() => undefined)));
      },
    ],
  ];
  const every = secs(plan.short, 10, 60);
  const duration = secs(plan.short, 60, 600);
  const began = now();
  for (let i = 0; now() - began + every <= duration; i++) {
    await sleep(every / 2);
    const [what, fault] = faults[i % faults.length]!;
    const at = now();
    await fault();
    result.notes.push(`${((at - began) / 1000).toFixed(0)} s into the soak: ${what}`);
    await sleep(Math.max(0, every / 2 - (now() - at)));
  }
  await sleep(Math.max(0, duration - (now() - began)));
  await load.stop();
  await sleep(2000);
  await finish(result, db, label, load, clients, () => a.url, undefined);
  // Idle connections close after 30 s in the pool: compared once both ends are settled the same way.
  const end = { rssKb: a.rssKb(), fds: a.openFds(), connections: await connections() };
  result.checks.push(
    { what: 'instance a (never killed) kept running', ok: a.pid === pidA },
    {
      what: "instance a's memory flat (RSS at the end within 1.5× + 32 MB of the start)",
      ok: end.rssKb <= start.rssKb * 1.5 + 32_768,
      detail: `${(start.rssKb / 1024).toFixed(0)} → ${(end.rssKb / 1024).toFixed(0)} MB`,
    },
    {
      what: "instance a's open files flat, client connections aside (within +10)",
      ok: end.fds <= start.fds + 10,
      detail: `${start.fds} → ${end.fds}`,
    },
    {
      // Per instance: the pool and the event log's LISTEN session.
      what: "the service's database connections bounded (≤ 2 × (PG_POOL_MAX + 2))",
      ok: end.connections <= 24,
      detail: `${start.connections} → ${end.connections}`,
    },
  );
  return result;
}
