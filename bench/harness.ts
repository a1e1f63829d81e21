/** The benchmark's harness, loaded by bench/run.ts once the command line is parsed. */
import { execFileSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { flags } from './command.js';
import { ablate, ablationSection, runsOn, type Ablation } from './ablation.js';
import {
  benchServer,
  cleanUp,
  ensureDataset,
  lockDatasets,
  vacuumQueue,
  type BenchServer,
  type Dataset,
} from './dataset.js';
import { CONNECTIONS, drive } from './load.js';
import { cleanUpPeer, compareWithPeer, ensurePeerDataset, installPeer, peerVersion, startPeer } from './peer.js';
import { findPgbench, runPgbench, type PgbenchResult } from './pgbench.js';
import {
  freePort,
  log,
  memoryKb,
  OUT,
  PG_POOL_MAX,
  resetPeakRss,
  ROOT,
  run,
  startChild,
  startEdge,
  startService,
  type Child,
} from './processes.js';
import { NGINX } from '../test/helpers/edge-cache.js';
import { hitRate, writeResults, type Outcome, type Sample, type Scenario } from './report.js';
import { CEILING, peerPost, selectScenarios, type Context } from './scenarios.js';
import { noDoomed, type Session } from './session.js';
import { createOwnPosts, openSession, pgbenchScripts, scenarioContext } from './setup.js';
import { checkOut, parseVariant, removeVariants, variantDataset, type Variant } from './variants.js';

const SMOKE = flags.smoke === true;
const WITH_PEER = flags['no-peer'] !== true && (!SMOKE || flags.peer === true);

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
      // about five minutes with the peer (see bench/RESULTS.md).
      rounds: 3,
      seconds: 4,
      warmupSeconds: 2,
      depth: 500_000,
    };
const ROUNDS = flags.rounds ? Number(flags.rounds) : PLAN.rounds;
const SECONDS = flags.seconds ? Number(flags.seconds) : PLAN.seconds;
// CI installs nginx before the smoke; a smoke run without it leaves the edge out, a full run needs it.
if (!NGINX && !SMOKE)
  throw new Error('nginx is not installed (Debian: apt-get install nginx-light): the edge needs it');
const SCENARIOS = selectScenarios(flags.only?.split(',')).filter((s) => NGINX || s.on !== 'edge');
const VARIANTS = (flags.variant ?? []).map(parseVariant);
if (new Set(VARIANTS.map((v) => v.name)).size < VARIANTS.length)
  throw new Error('--variant: two variants have the same name');

/** Node flags of a service process: a CPU profile with --profile, and --node-flags. */
const nodeArgs = (name: string) => [
  ...(flags.profile
    ? ['--cpu-prof', `--cpu-prof-dir=${join(OUT, 'profiles')}`, `--cpu-prof-name=${name}.cpuprofile`]
    : []),
  ...(flags['node-flags']?.split(' ').filter(Boolean) ?? []),
];

/** What setUp started and loaded; `children` and `closers` are stopped at the end whatever happens. */
interface Run {
  server: BenchServer;
  children: Child[];
  closers: (() => Promise<void>)[];
  variants: Variant[];
  big?: Dataset;
  small?: Dataset;
  peerDataset?: Dataset;
  /** Releases the run's hold on its data sets. */
  unlock?: () => Promise<void>;
}

/** The bare Fastify baseline, serving the service's own first list page. */
async function startBaseline(service: Child): Promise<Child> {
  const first = await fetch(`${service.url}/posts?sort=-createdAt`);
  if (first.status !== 200) throw new Error(`GET /posts answered ${first.status}`);
  const payloadFile = join(OUT, 'baseline-payload.json');
  await writeFile(payloadFile, await first.text());
  const port = await freePort();
  const env = { PATH: process.env.PATH ?? '', NODE_ENV: 'production' };
  return startChild('baseline', ['--import', 'tsx', 'bench/baseline-server.ts', payloadFile, String(port)], env, port, {
    readyPath: '/posts',
  });
}

/** The peer, if it is installed and runs: its process, its session, and what it was. */
async function setUpPeer(r: Run, ctx: Pick<Context, 'userIds' | 'big' | 'popularPost'>) {
  const install = WITH_PEER
    ? await installPeer(log)
    : { skipped: SMOKE ? 'skipped in a smoke run (--peer runs it)' : 'skipped (--no-peer)' };
  if (!('node' in install) || !r.peerDataset)
    return { text: `not run: ${'skipped' in install ? install.skipped : 'no database'}` };
  const peer = await startPeer(install.node, r.peerDataset, await freePort());
  r.children.push(peer);
  const same = await compareWithPeer(ctx.big, peer, ctx.popularPost);
  const ownPosts = await createOwnPosts(peer.url, ctx.userIds.length, (user) => JSON.stringify(peerPost(ctx, user)));
  const text = `${peerVersion(install.node)}, its defaults (pool of 10, no cache), logging at warn, on ${r.peerDataset.name}: its own plain schema with the rows of ${r.big!.name}; ${same}`;
  log(`peer up: pid ${peer.pid}, ${text}`);
  const session: Session = { tokens: [], ownPosts, doomed: noDoomed(0), databaseUrl: r.peerDataset.url };
  return { peer, session, text };
}

/** Builds, loads and starts everything the scenarios need; returns their context. */
async function setUp(r: Run): Promise<{ ctx: Context; peerText: string }> {
  const size = ({ users, posts, comments }: typeof PLAN.big) => ({ users, posts, comments });
  const big = (r.big = await ensureDataset(r.server, PLAN.big.name, size(PLAN.big), log));
  const small = (r.small = await ensureDataset(r.server, PLAN.small.name, size(PLAN.small), log));
  // Loaded even when the peer does not run in a smoke run, so CI exercises it.
  if (WITH_PEER || SMOKE) r.peerDataset = await ensurePeerDataset(r.server, big, log);
  for (const spec of VARIANTS) {
    const v = await checkOut(spec, log);
    r.variants.push(v);
    v.dataset = await variantDataset(v, r.server, big, log);
  }

  // This checkout's services expose their metrics as deployed, each on a port of its own; a variant takes its own settings.
  const service = async (name: string, dataset: Dataset, variant?: Variant) => {
    const port = await freePort();
    const env = variant ? variant.env : { METRICS_PORT: String(await freePort()) };
    return startService(name, dataset.url, port, { root: variant?.dir, nodeArgs: nodeArgs(name), env });
  };
  const bigService = await service('service', big);
  const smallService = await service('service-10k', small);
  r.children.push(bigService, smallService);
  const edge = NGINX ? await startEdge(bigService) : undefined;
  if (edge) r.children.push(edge);
  log(
    `services up: pid ${bigService.pid} (${big.name}), pid ${smallService.pid} (${small.name}); ` +
      (edge ? `nginx ${edge.pid} in front of the first at ${edge.url}` : 'no nginx: the edge is left out'),
  );
  const baseline = await startBaseline(bigService);
  r.children.push(baseline);
  for (const v of r.variants) {
    v.child = await service(`variant-${v.name}`, v.dataset!, v);
    r.children.push(v.child);
    log(`variant ${v.name} up: pid ${v.child.pid} (${v.dataset!.name})`);
  }

  const monitor = new pg.Client({ connectionString: r.server.adminUrl });
  await monitor.connect();
  r.closers.push(() => monitor.end());
  const { userIds, ...session } = await openSession(bigService, big);
  const picked = await scenarioContext(big, PLAN.depth);
  const sessions = new Map<Child, Session>();
  const databases = [
    big.name,
    small.name,
    ...(r.peerDataset ? [r.peerDataset.name] : []),
    ...r.variants.map((v) => v.dataset!.name),
  ];
  const ctx: Context = {
    monitor,
    databases,
    big: bigService,
    edge,
    small: smallService,
    baseline,
    userIds,
    ...session,
    sessions,
    ...picked,
  };
  for (const v of r.variants) ctx.sessions.set(v.child!, await openSession(v.child!, v.dataset!));
  const peer = await setUpPeer(r, ctx);
  if (peer.peer) {
    ctx.peer = peer.peer;
    ctx.sessions.set(peer.peer, peer.session);
  }
  log(
    `logged in ${ctx.tokens.length} users; popular post ${ctx.popularPost}, author ${ctx.author.id} page ${ctx.author.page}, cursor after ${ctx.deepCursor}, ` +
      `offset pages ${ctx.deepPage} and ${ctx.lastPage}, most prolific author ${ctx.prolific.id} (${ctx.prolific.posts} posts) pages ${ctx.prolific.middlePage} and ${ctx.prolific.lastPage}`,
  );
  return { ctx, peerText: peer.text };
}

/** One line of the log for a sample. */
function describe(id: string, sample: Sample, round: number): string {
  let line = `round ${round + 1}/${ROUNDS} ${id.padEnd(16)} ${sample.rps.toFixed(0).padStart(6)} req/s  p50 ${sample.p50} ms  p99 ${sample.p99} ms  cpu ${sample.cpuMsPerRequest.toFixed(3)} ms/req  db ${sample.dbCpuMsPerRequest.toFixed(3)} ms/req  wal ${sample.walBytesPerRequest.toFixed(0)} B/req`;
  if (Object.keys(sample.edge).length) line += `  edge hits ${hitRate([sample])} ${JSON.stringify(sample.edge)}`;
  if (sample.background)
    line += `  background ${sample.background.perSecond.toFixed(1)}/s ${JSON.stringify(sample.background.statusCodes)}`;
  if (sample.errors || sample.non2xx)
    line += `  ERRORS ${sample.errors} ${JSON.stringify(sample.errorKinds)} non-2xx ${sample.non2xx} ${JSON.stringify(sample.statusCodes)}`;
  if (sample.background?.unexpected) line += `  UNEXPECTED background answers ${sample.background.unexpected}`;
  return line;
}

/**
 * Each scenario (and its twin) once for a few seconds: JIT, caches and pools
 * warm. A variant runs its scenarios that long plus one measured run's length,
 * so that it is as warm as the main instance is (after this and the
 * scenario's own run) when the two are compared: with less, a build identical
 * to the main one measured more CPU per write (bench/RESULTS.md).
 */
async function warmUp(ctx: Context, variants: Variant[]): Promise<void> {
  log(
    `warm-up: ${PLAN.warmupSeconds} s per scenario${variants.length ? `, ${PLAN.warmupSeconds + SECONDS} s on variants` : ''}`,
  );
  for (const s of SCENARIOS) {
    if (PLAN.warmupSeconds > 0 && s.twin && ctx.peer) await drive(s.twin, ctx, PLAN.warmupSeconds);
    if (PLAN.warmupSeconds > 0) await drive(s, ctx, PLAN.warmupSeconds);
    for (const v of variants.filter((x) => runsOn(x, s))) await drive(s, ctx, PLAN.warmupSeconds + SECONDS, v.child);
  }
}

interface Measured {
  pgbench: boolean;
  http: Map<string, Sample[]>;
  db: Map<string, PgbenchResult[]>;
  ablation: Ablation;
}

/**
 * One round of scenario `s`: the ceiling, its peer twin, its quiet reads, its straight twin and
 * what it is measured beside (page 1 of its list) right before it and again right after it (it
 * is compared with the mean of the two, so that a drift of the machine's speed across the three
 * windows cancels out instead of landing on one side of the ratio), then pgbench with its SQL,
 * then the variants.
 */
async function measureScenario(
  s: Scenario<Context>,
  round: number,
  ctx: Context,
  m: Measured,
  pgbench: Pgbench | undefined,
  variants: Variant[],
): Promise<void> {
  const record = (x: Scenario<Context>, sample: Sample) => {
    m.http.set(x.id, [...(m.http.get(x.id) ?? []), sample]);
    return describe(x.id, sample, round);
  };
  const paired = s.target === undefined ? undefined : await drive(CEILING, ctx, SECONDS);
  const twin = s.twin && ctx.peer ? await drive(s.twin, ctx, SECONDS) : undefined;
  if (twin) log(record(s.twin!, twin));
  const quiet = s.quiet ? await drive(s.quiet, ctx, SECONDS) : undefined;
  if (quiet) log(record(s.quiet!, quiet));
  const straight = s.straight ? await drive(s.straight, ctx, SECONDS) : undefined;
  if (straight) log(record(s.straight!, straight));
  // Nearest to it: page 1 of its list, the closest comparison.
  const beside = s.beside ? await drive(s.beside, ctx, SECONDS) : undefined;
  if (beside) log(record(s.beside!, beside));
  const sample = await drive(s, ctx, SECONDS);
  let line = record(s, sample);
  const twice = async (other: Scenario<Context>, before: Sample, show: boolean) => {
    const after = await drive(other, ctx, SECONDS);
    if (show) log(record(other, after));
    return [before, after] as const;
  };
  const again = async (other: Scenario<Context>, before: Sample, show: boolean) => {
    const [, after] = await twice(other, before, show);
    return (before.rps + after.rps) / 2;
  };
  if (beside) {
    const runs = await twice(s.beside!, beside, true);
    const mean = (pick: (x: Sample) => number) => (pick(runs[0]) + pick(runs[1])) / 2;
    sample.besideRps = mean((x) => x.rps);
    sample.besideCost = {
      p50: mean((x) => x.p50),
      cpuMsPerRequest: mean((x) => x.cpuMsPerRequest),
      dbCpuMsPerRequest: mean((x) => x.dbCpuMsPerRequest),
    };
  }
  if (twin) sample.twinRps = await again(s.twin!, twin, true);
  if (quiet) sample.quietRps = await again(s.quiet!, quiet, true);
  if (straight) sample.straightRps = await again(s.straight!, straight, true);
  if (paired) sample.ceilingRps = await again(CEILING, paired, false);
  const script = pgbench?.scripts.get(s.id);
  if (pgbench && script) {
    const result = await runPgbench(pgbench.path, script.url, script.files, PG_POOL_MAX, SECONDS);
    m.db.set(s.id, [...(m.db.get(s.id) ?? []), result]);
    line += ` | pgbench ${result.tps.toFixed(0)} tps`;
    if (result.failed) line += ` (${result.failed} failed)`;
  }
  log(line);
  const show = (id: string, x: Sample) => log(describe(id, x, round));
  await ablate(s, variants, ctx, SECONDS, m.ablation, show, (text) => log(`round ${round + 1}/${ROUNDS} ${text}`));
}

interface Pgbench {
  path: string;
  scripts: Map<string, { files: string[]; url: string }>;
}

async function measure(ctx: Context, r: Run): Promise<Measured> {
  const path = findPgbench();
  const dir = SMOKE ? join(OUT, 'sql') : join(ROOT, 'bench', 'sql');
  const scripts = await pgbenchScripts(ctx, { big: r.big!, small: r.small! }, SCENARIOS, dir);
  if (!path) log('pgbench not found (Debian: apt-get install postgresql-15): the database ceilings are skipped');
  else log(`pgbench scripts written to ${dir.slice(ROOT.length + 1)}/`);
  const variants = r.variants.map((v) => ({
    name: v.name,
    ref: v.ref,
    commit: v.commit,
    cache: v.cache,
    database: v.dataset!.name,
  }));
  const m: Measured = {
    pgbench: path !== undefined,
    http: new Map(),
    db: new Map(),
    ablation: { variants, scenarios: SCENARIOS, samples: new Map(), brackets: [] },
  };
  for (let round = 0; round < ROUNDS; round++) {
    // A different starting scenario each round, so no scenario always follows the same one.
    const order = SCENARIOS.map((_, k) => SCENARIOS[(k + round * 3) % SCENARIOS.length]!);
    for (const s of order) {
      for (const d of new Set([r.big!, ...r.variants.map((v) => v.dataset!)])) await vacuumQueue(d);
      await measureScenario(s, round, ctx, m, path ? { path, scripts } : undefined, r.variants);
    }
  }
  return m;
}

/** Stops everything the run started and removes what it added; safe to call twice. */
function tearDown(r: Run): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () =>
    (done ??= (async () => {
      for (const close of r.closers) await close().catch(() => undefined);
      for (const child of r.children.reverse()) await child.stop().catch(() => undefined);
      await removeVariants(VARIANTS);
      // What the run added goes, so the next run reuses the data sets as they were seeded.
      const datasets = new Set([r.big, ...r.variants.map((v) => v.dataset)]);
      for (const d of datasets)
        if (d) await cleanUp(d).catch((e: unknown) => log(`cleaning ${d.name} up: ${String(e)}`));
      if (r.peerDataset)
        await cleanUpPeer(r.peerDataset).catch((e: unknown) => log(`cleaning ${r.peerDataset!.name} up: ${String(e)}`));
      await r.unlock?.();
      await r.server.stop();
    })());
}

async function main(): Promise<number> {
  log(
    `${SMOKE ? 'smoke' : 'full'} run: ${ROUNDS} round(s) × ${SCENARIOS.length} scenarios × ${SECONDS} s, ${CONNECTIONS} connections` +
      (VARIANTS.length ? `, variants ${VARIANTS.map((v) => v.name).join(', ')}` : ''),
  );
  await run('npm', ['run', '-s', 'build']);
  log('built dist/');
  const server = await benchServer(process.env.BENCH_DATABASE_URL || undefined, log);
  log(`database server: ${server.source}`);
  const r: Run = { server, children: [], closers: [], variants: [] };
  const finish = tearDown(r);
  // Ctrl-C, a kill or a closed pipe (`| head`) must not leave servers running or worktrees registered.
  process.stdout.on('error', () => undefined);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
    process.once(signal, () => void finish().finally(() => process.exit(130)));
  try {
    r.unlock = await lockDatasets(server, PLAN.big.name, log);
    const { ctx, peerText } = await setUp(r);
    const setupRssKb = memoryKb(ctx.big.pid, 'VmHWM');
    for (const service of [ctx.big, ctx.small]) resetPeakRss(service.pid);
    await warmUp(ctx, r.variants);
    const warmRss = memoryKb(ctx.big.pid, 'VmHWM');
    const m = await measure(ctx, r);
    const outcome: Outcome = {
      smoke: SMOKE,
      date: new Date().toISOString(),
      rounds: ROUNDS,
      seconds: SECONDS,
      connections: CONNECTIONS,
      pgbenchClients: PG_POOL_MAX,
      pgbench: m.pgbench,
      datasets: { big: r.big!, small: r.small! },
      // Each twin, quiet and straight scenario gets its row right before the one it is compared with.
      scenarios: SCENARIOS.flatMap((s) => [
        ...(s.twin && ctx.peer ? [s.twin] : []),
        ...(s.quiet ? [s.quiet] : []),
        ...(s.straight ? [s.straight] : []),
        ...(s.beside ? [s.beside] : []),
        s,
      ]).filter((s, k, all) => all.findIndex((x) => x.id === s.id) === k),
      http: m.http,
      db: m.db,
      peakRssMb: memoryKb(ctx.big.pid, 'VmHWM') / 1024,
      warmRssMb: warmRss / 1024,
      setupRssMb: setupRssKb / 1024,
      ctx: {
        author: ctx.author,
        popularPost: ctx.popularPost,
        deepCursor: ctx.deepCursor,
        secondCursor: ctx.secondCursor,
        deepPage: ctx.deepPage,
        lastPage: ctx.lastPage,
        prolific: ctx.prolific,
      },
      machine: `${execFileSync('nproc').toString().trim()} cores, Node ${process.version}, ${server.source}`,
      peer: { ran: ctx.peer !== undefined, text: peerText },
      ...(r.variants.length ? { ablation: ablationSection(m.ablation) } : {}),
    };
    const file =
      SMOKE || flags.only || flags.rounds || flags['node-flags']
        ? join(OUT, 'RESULTS.md')
        : join(ROOT, 'bench', 'RESULTS.md');
    const summary = await writeResults(file, outcome);
    log(`results written to ${file.slice(ROOT.length + 1)}`);
    console.log(summary.line);
    return summary.failedRequests > 0 ? 1 : 0;
  } finally {
    await finish();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
