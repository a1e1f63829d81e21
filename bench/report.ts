/**
 * Turns the samples of a run into bench/RESULTS.md: medians over the rounds,
 * ratios to the ceilings measured in the same rounds (per round, then the
 * median, so a slow round moves both sides together), and each target with
 * its verdict. Only the part between the markers is rewritten; the
 * hand-written text around it stays.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import type { Dataset } from './dataset.js';
import type { PgbenchResult } from './pgbench.js';

/** Requests the bench sends at a fixed rate from its own process while a scenario's load runs. */
export interface Background<C> {
  perSecond: number;
  title: string;
  request: (ctx: C) => { method: string; path: string; headers: Record<string, string>; body?: string };
  /** The status every one of them must get (e.g. 401 for anonymous writes). */
  expect: number;
}

export interface Scenario<C> {
  id: string;
  title: string;
  /** `edge`: through nginx with deploy/edge-cache.conf in front of `big`, as deployed; `big`, `small`: the service straight. */
  on: 'edge' | 'big' | 'small' | 'baseline' | 'peer';
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  /** `user`: which logged-in user sends it (authenticated scenarios and the peer's writes). */
  path: (ctx: C, user: number) => string;
  body?: (ctx: C, user: number) => string;
  /** Each request draws a post id in this range and puts it in place of ":id" in the path. */
  randomId?: (ctx: C) => [number, number];
  /**
   * How the drawn id shows in the service's SQL when not as is (a page number: as its offset), for the
   * pgbench script: its value for an id, and the pgbench expression of `:id` that gives it.
   */
  randomIdInSql?: { value: (id: number) => number; expression: string };
  authenticated?: boolean;
  /** Minimum req/s as a fraction of the HTTP ceiling. */
  target?: number;
  /** The peer's closest equivalent, measured right before and right after this one in each round. */
  twin?: Scenario<C>;
  /** Minimum req/s as a multiple of the twin's. */
  twinTarget?: number;
  /** Sent alongside the load; `quiet` (the same load alone) is measured right before and right after. */
  background?: Background<C>;
  quiet?: Scenario<C>;
  /** Minimum req/s as a fraction of the quiet scenario's. */
  quietTarget?: number;
  /** The same requests straight to the service, measured right before and right after this one (through the edge). */
  straight?: Scenario<C>;
  /** Minimum req/s as a multiple of the straight scenario's (none: shown against 1×, not a target). */
  straightTarget?: number;
  /** Minimum req/s as a multiple of a `:cache` variant's (an older build's in-process cache) run right beside it. */
  variantTarget?: number;
  /** Maximum p50 as a multiple of scenario `id`'s p50 (measured in the same run). */
  p50Versus?: { id: string; max: number };
  /** autocannon connections, when not the run's (a request that takes seconds). */
  connections?: number;
  /** What it is compared with (page 1 of the same list), on the same instance, measured right before and right after it in each round. */
  beside?: Scenario<C>;
  /** Minimum req/s as a fraction of `beside`'s (none: the ratio is shown, not judged). */
  besideTarget?: number;
  /**
   * Runs before each of its windows, outside it, with the context its requests read and the
   * instance's URL (e.g. creates the posts its deletes remove).
   */
  prepare?: (ctx: C, url: string, seconds: number) => Promise<void>;
  /** false: no pgbench script (SQL that cannot be replayed as recorded: a delete removes its row once). */
  pgbench?: false;
}

export interface Sample {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  errors: number;
  /** The errors by their code (ECONNRESET…) or message ("request timed out"). */
  errorKinds: Record<string, number>;
  /** Connection resets not counted in `errors` (at most one per 10 000 answers, bench/load.ts). */
  non2xx: number;
  statusCodes: Record<string, number>;
  cpuMsPerRequest: number;
  dbCpuMsPerRequest: number;
  /** WAL the whole cluster wrote per request (bytes). */
  walBytesPerRequest: number;
  /** req/s of the HTTP ceiling measured right before and after this sample, their mean (scenarios with a target). */
  ceilingRps?: number;
  /** req/s of the twin (the peer) measured right before and after this sample (their mean). */
  twinRps?: number;
  /** req/s of the quiet scenario measured right before and after this sample (their mean). */
  quietRps?: number;
  /** req/s of the straight scenario measured right before and after this sample (their mean). */
  straightRps?: number;
  /** req/s of the `beside` scenario measured right before and after this sample (their mean). */
  besideRps?: number;
  /** The same runs' p50 and CPU per request (their means). */
  besideCost?: Pick<Sample, 'p50' | 'cpuMsPerRequest' | 'dbCpuMsPerRequest'>;
  /** A variant's sample: req/s of the main instance measured right before and after it (their mean). */
  mainRps?: number;
  /** Answers through the edge by their `X-Cache-Status` (HIT, MISS, EXPIRED, UPDATING, STALE, BYPASS…); empty elsewhere. */
  edge: Record<string, number>;
  /** The background requests: how many per second went out, and their statuses. */
  background?: { perSecond: number; statusCodes: Record<string, number>; unexpected: number };
}

export interface Outcome {
  smoke: boolean;
  date: string;
  rounds: number;
  seconds: number;
  connections: number;
  pgbenchClients: number;
  pgbench: boolean;
  datasets: { big: Dataset; small: Dataset };
  scenarios: Scenario<never>[];
  http: Map<string, Sample[]>;
  db: Map<string, PgbenchResult[]>;
  peakRssMb: number;
  warmRssMb: number;
  /** Peak during the setup (log-ins: scrypt), before the count was restarted. */
  setupRssMb: number;
  ctx: {
    author: { id: number; page: number };
    popularPost: number;
    deepCursor: number;
    secondCursor: number;
    deepPage: number;
    lastPage: number;
    prolific: { id: number; posts: number; middlePage: number; lastPage: number };
  };
  machine: string;
  /** What the peer was (name, version, its Node), or why it did not run. */
  peer: { ran: boolean; text: string };
  /** Variants run beside the main instance (`--variant`): their table (bench/ablation.ts) and its requests. */
  ablation?: { lines: string[]; failed: number; requests: number; checks: Check[] };
}

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';
const RSS_LIMIT_MB = 150;

export function median(values: number[]): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Median over rounds of a[round] / b[round]. */
function ratio(a: number[] | undefined, b: number[] | undefined): number {
  if (!a || !b) return NaN;
  return median(a.map((x, k) => x / (b[k] ?? NaN)));
}

export const fmt = (n: number, digits = 0) =>
  Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a';
const pct = (n: number, digits = 0) => (Number.isFinite(n) ? `${(n * 100).toFixed(digits)} %` : 'n/a');

export interface Check {
  what: string;
  value: string;
  goal: string;
  met: boolean;
  /** Not one of the issue's targets: shown to explain one. */
  info?: boolean;
  /** Not measured in this run (peer skipped, scenario left out by --only): neither met nor missed. */
  skipped?: boolean;
}

export const times = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}×` : 'n/a');

/** nginx answered from its cache, without the service: a fresh entry, or a stale one while another request refreshes it. */
const FROM_CACHE = ['HIT', 'UPDATING', 'STALE'];

/** Share of the edge's answers that came from its cache, or n/a when none went through the edge. */
export function hitRate(samples: Sample[]): string {
  let hits = 0;
  let all = 0;
  for (const x of samples)
    for (const [status, n] of Object.entries(x.edge)) {
      all += n;
      if (FROM_CACHE.includes(status)) hits += n;
    }
  return all ? `${((hits / all) * 100).toFixed(1)} %` : 'n/a';
}

export async function writeResults(file: string, o: Outcome): Promise<{ line: string; failedRequests: number }> {
  const rps = (id: string) => o.http.get(id)?.map((s) => s.rps);
  const ceiling = rps('ceiling');
  const rows: string[] = [];
  const checks: Check[] = [];
  let failedRequests = 0;
  let requests = 0;

  const mixed: string[] = [];
  const besides: string[] = [];
  for (const s of o.scenarios) {
    const samples = o.http.get(s.id) ?? [];
    const errors = samples.reduce((n, x) => n + x.errors + x.non2xx + (x.background?.unexpected ?? 0), 0);
    failedRequests += errors;
    requests += samples.reduce((n, x) => n + x.requests, 0);
    const pgb = o.db.get(s.id);
    const paired = samples.every((x) => x.ceilingRps !== undefined);
    const vsHttp =
      s.id === 'ceiling'
        ? 1
        : paired && samples.length
          ? median(samples.map((x) => x.rps / x.ceilingRps!))
          : ratio(rps(s.id), ceiling);
    const vsDb = ratio(
      rps(s.id),
      pgb?.map((x) => x.tps),
    );
    const vsPeer = s.twin ? median(samples.map((x) => (x.twinRps ? x.rps / x.twinRps : NaN))) : NaN;
    // The baseline sends no SQL: no database figures.
    const ofDb = (pick: (x: Sample) => number, digits?: number) =>
      s.on === 'baseline' ? '–' : fmt(median(samples.map(pick)), digits);
    rows.push(
      `| ${s.id} | ${fmt(median(samples.map((x) => x.rps)))} | ${fmt(median(samples.map((x) => x.p50)), 1)} | ${fmt(median(samples.map((x) => x.p99)), 1)} | ` +
        `${fmt(median(samples.map((x) => x.cpuMsPerRequest)), 3)} | ${ofDb((x) => x.dbCpuMsPerRequest, 3)} | ${ofDb((x) => x.walBytesPerRequest)} | ` +
        `${pct(vsHttp)} | ${s.twin ? times(vsPeer) : '–'} | ${pgb ? fmt(median(pgb.map((x) => x.tps))) : '–'} | ${pgb ? `${fmt(median(pgb.map((x) => x.p50)), 2)} / ${fmt(median(pgb.map((x) => x.p99)), 2)}` : '–'} | ` +
        `${pgb ? pct(vsDb) : '–'} | ${s.on === 'edge' ? hitRate(samples) : '–'} | ${errors} |`,
    );
    if (s.target !== undefined) {
      checks.push({
        what: `${s.id}: req/s vs HTTP ceiling`,
        value: pct(vsHttp),
        goal: `≥ ${pct(s.target)}`,
        met: vsHttp >= s.target,
      });
    }
    if (s.straight) {
      const vs = median(samples.map((x) => (x.straightRps ? x.rps / x.straightRps : NaN)));
      checks.push({
        what: `${s.id}: req/s through nginx vs straight to the service (\`${s.straight.id}\`)`,
        value: times(vs),
        goal: `≥ ${(s.straightTarget ?? 1).toFixed(1)}×`,
        met: vs >= (s.straightTarget ?? 1),
        info: s.straightTarget === undefined,
      });
    }
    if (s.twin && s.twinTarget !== undefined) {
      checks.push({
        what: `${s.id}: req/s vs Platformatic DB (\`${s.twin.id}\`), straight`,
        value: times(vsPeer),
        goal: `≥ ${s.twinTarget.toFixed(1)}×`,
        met: vsPeer >= s.twinTarget,
        skipped: !Number.isFinite(vsPeer),
      });
    }
    if (s.p50Versus) {
      const plain = o.http.get(s.p50Versus.id)?.map((x) => x.p50);
      const vs = ratio(
        samples.map((x) => x.p50),
        plain,
      );
      checks.push({
        what: `${s.id}: p50 vs the plain page \`${s.p50Versus.id}\`, straight`,
        value: times(vs),
        goal: `≤ ${s.p50Versus.max.toFixed(1)}×`,
        met: vs <= s.p50Versus.max,
        skipped: !Number.isFinite(vs),
      });
    }
    if (s.beside) {
      const vsBeside = median(samples.map((x) => (x.besideRps ? x.rps / x.besideRps : NaN)));
      const goal = s.besideTarget === undefined ? undefined : `≥ ${pct(s.besideTarget, 1)}`;
      const met = s.besideTarget !== undefined && vsBeside >= s.besideTarget;
      const both = (
        pick: (x: Pick<Sample, 'p50' | 'cpuMsPerRequest' | 'dbCpuMsPerRequest'>) => number,
        digits: number,
      ) =>
        `${fmt(median(samples.map(pick)), digits)} | ${fmt(median(samples.map((x) => (x.besideCost ? pick(x.besideCost) : NaN))), digits)}`;
      besides.push(
        `| ${s.id} | \`${s.beside.id}\` | ${fmt(median(samples.map((x) => x.rps)))} | ${fmt(median(samples.map((x) => x.besideRps ?? NaN)))} | ` +
          `${pct(vsBeside, 1)} | ${goal === undefined ? '– (reported)' : `${goal}: ${met ? 'met' : '**missed**'}`} | ` +
          `${both((x) => x.p50, 1)} | ${both((x) => x.cpuMsPerRequest, 3)} | ${both((x) => x.dbCpuMsPerRequest, 3)} |`,
      );
      if (goal !== undefined) {
        checks.push({
          what: `${s.id}: req/s vs \`${s.beside.id}\` measured right beside it`,
          value: pct(vsBeside, 1),
          goal,
          met,
          skipped: !Number.isFinite(vsBeside),
        });
      }
    }
    if (s.quiet && s.background) {
      const vsQuiet = median(samples.map((x) => (x.quietRps ? x.rps / x.quietRps : NaN)));
      const quietSamples = o.http.get(s.quiet.id) ?? [];
      const statuses = new Map<string, number>();
      for (const x of samples)
        for (const [code, n] of Object.entries(x.background?.statusCodes ?? {}))
          statuses.set(code, (statuses.get(code) ?? 0) + n);
      mixed.push(
        `| ${s.id} | ${s.background.title} | ${fmt(median(samples.map((x) => x.background?.perSecond ?? NaN)), 1)} (${[...statuses].map(([c, n]) => `${n}× ${c}`).join(', ') || 'none'}) | ` +
          `${fmt(median(samples.map((x) => x.quietRps ?? NaN)))} | ${fmt(median(samples.map((x) => x.rps)))} | ${pct(vsQuiet)} | ${hitRate(quietSamples)} | ${hitRate(samples)} |`,
      );
      if (s.quietTarget !== undefined) {
        checks.push({
          what: `${s.id}: hot reads' req/s vs quiet (${s.background.title})`,
          value: pct(vsQuiet),
          goal: `≥ ${pct(s.quietTarget)}`,
          met: vsQuiet >= s.quietTarget,
        });
      }
    }
  }

  const deep = ratio(rps('cursor-deep'), rps('cursor-first'));
  checks.push({
    what: 'cursor page 500 000 deep vs first cursor page (req/s)',
    value: fmt(deep, 2),
    goal: '≥ 0.90',
    met: deep >= 0.9,
    skipped: !Number.isFinite(deep),
  });
  const deepUncached = ratio(rps('cursor-deep-uncached'), rps('cursor-first-uncached'));
  checks.push({
    what: 'the same straight to the service: every request runs its SQL',
    value: fmt(deepUncached, 2),
    goal: '≥ 0.90',
    met: deepUncached >= 0.9,
    info: true,
    skipped: !Number.isFinite(deepUncached),
  });
  const depth = ratio(rps('cursor-deep-uncached'), rps('cursor-second-uncached'));
  checks.push({
    what: 'straight: cursor page 500 000 deep vs the second cursor page, the same query (req/s)',
    value: fmt(depth, 2),
    goal: '≥ 0.90',
    met: depth >= 0.9,
    info: true,
    skipped: !Number.isFinite(depth),
  });
  // Straight on both sides: what is compared is the database's work for the total.
  const sizeFree = ratio(rps('list-first-uncached'), rps('list-first-10k-uncached'));
  checks.push({
    what: `first offset page with total, straight: ${fmt(o.datasets.big.size.posts)} vs ${fmt(o.datasets.small.size.posts)} posts (req/s)`,
    value: fmt(sizeFree, 2),
    goal: '≥ 0.80',
    met: sizeFree >= 0.8,
    skipped: !Number.isFinite(sizeFree),
  });
  checks.push({
    what: 'service peak RSS (VmHWM) under this load',
    value: `${fmt(o.peakRssMb, 0)} MB`,
    goal: `≤ ${RSS_LIMIT_MB} MB`,
    met: o.peakRssMb <= RSS_LIMIT_MB,
  });
  checks.push(...(o.ablation?.checks ?? []));
  failedRequests += o.ablation?.failed ?? 0;
  requests += o.ablation?.requests ?? 0;
  checks.push({
    what: 'errors, timeouts and non-2xx answers',
    value: String(failedRequests),
    goal: '0',
    met: failedRequests === 0,
  });

  const seedLine = (d: Dataset) =>
    d.seeded
      ? `seeded in this run: ${d.seeded.seconds.toFixed(1)} s (${d.seeded.mode}), then VACUUM ANALYZE ${d.seeded.vacuumSeconds.toFixed(1)} s`
      : 'reused from an earlier run';
  const targets = checks.filter((c) => !c.info && !c.skipped);
  const met = targets.filter((c) => c.met).length;
  const section = [
    START,
    `## Figures of the last ${o.smoke ? 'smoke ' : ''}run`,
    '',
    `${o.date} · ${o.machine} · ${o.rounds} round(s) × ${o.seconds} s per scenario, ${o.connections} connections (autocannon), ` +
      `pgbench ${o.pgbench ? `-M prepared with ${o.pgbenchClients} clients (the service's pool size)` : 'not found: no database ceilings'}.`,
    '',
    `- ${o.datasets.big.name}: ${fmt(o.datasets.big.size.posts)} posts, ${fmt(o.datasets.big.size.comments)} comments, ${fmt(o.datasets.big.size.users)} users — ${seedLine(o.datasets.big)}`,
    `- ${o.datasets.small.name}: ${fmt(o.datasets.small.size.posts)} posts, ${fmt(o.datasets.small.size.comments)} comments, ${fmt(o.datasets.small.size.users)} users — ${seedLine(o.datasets.small)}`,
    `- author ${o.ctx.author.id} (page ${o.ctx.author.page}), popular post ${o.ctx.popularPost}, cursor after id ${o.ctx.deepCursor} (second page: after ${o.ctx.secondCursor}), ` +
      `offset pages ${o.ctx.deepPage} (the middle) and ${o.ctx.lastPage} (the last) of ${fmt(o.datasets.big.size.posts)} posts; ` +
      `most prolific author ${o.ctx.prolific.id} (${fmt(o.ctx.prolific.posts)} posts): pages ${o.ctx.prolific.middlePage} (the middle) and ${o.ctx.prolific.lastPage} (the last)`,
    '',
    'Scenarios without "-uncached" run through the edge as deployed: Debian\'s nginx with deploy/edge-cache.conf in front of the service ' +
      '(it keeps anonymous GETs for their s-maxage, 1 s, and passes requests with a token by); no pgbench runs for them (their "-uncached" twin, ' +
      'straight to the same service, has it). Edge hits: answers nginx gave from its cache (`X-Cache-Status` HIT, UPDATING or STALE). ' +
      'Medians over the rounds. CPU ms/req: user+system CPU of the service process (or of the baseline, for `ceiling`) per request; ' +
      "plus nginx's processes through the edge; DB CPU ms/req: of all PostgreSQL processes on the machine; WAL B/req: bytes of WAL the cluster wrote per request. × HTTP: req/s as a share of the mean of the ceiling measured right before and right after it " +
      '(scenarios with a target) or else in the same round; ' +
      '× DB: req/s as a share of pgbench running the same SQL.',
    '',
    '| scenario | req/s | p50 ms | p99 ms | CPU ms/req | DB CPU ms/req | WAL B/req | × HTTP ceiling | × Platformatic | pgbench tps | pgbench p50 / p99 ms | × DB ceiling | edge hits | errors + non-2xx |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...rows,
    '',
    `Peer: ${o.peer.text}. Rows ending in \`-platformatic\` run on it; × Platformatic is the req/s of the row's scenario over its ` +
      'Platformatic twin, the mean of its runs right before and right after it in the same round (median of the per-round ratios). CPU ms/req of a peer row is the ' +
      "peer process's.",
    '',
    ...(o.ablation?.lines ?? []),
    ...(besides.length
      ? [
          'Pages at any depth (issue 46): each row runs straight to the service right between two runs of page 1 of the same list ' +
            '(its path without `page` or `snapshot`: `beside` in bench/scenarios.ts), in every round; page 1 req/s is the mean of those two runs, ' +
            '× page 1 the median of the per-round ratios, and the page-1 columns of p50 and CPU are the means of the same two runs. ' +
            'CPU ms/req: the service process; DB CPU ms/req: all PostgreSQL processes. Rows without a goal are reported, not judged.',
          '',
          '| scenario | page 1 beside it | req/s | page 1 req/s | × page 1 | goal | p50 ms | page 1 p50 ms | CPU ms/req | page 1 CPU ms/req | DB CPU ms/req | page 1 DB CPU ms/req |',
          '|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|',
          ...besides,
          '',
        ]
      : []),
    ...(mixed.length
      ? [
          "Mixed loads: a scenario's reads (`hot-posts-…`: 1 000 hot posts through the edge, `GET /posts/{id}`, ids 1–1 000; " +
            '`…-uncached`: straight to the service), 32 connections, while the bench sends the background requests to the same instance at a fixed rate; ' +
            'the same reads alone (quiet) are measured right before and right after each (their mean). Hit rates: ' +
            "answers from nginx's cache (`X-Cache-Status` HIT, UPDATING or STALE) among all. CPU ms/req of these rows includes the background writes.",
          '',
          '| scenario | background | sent per s (statuses) | quiet req/s | req/s under it | × quiet | hit rate quiet | hit rate under it |',
          '|---|---|--:|--:|--:|--:|--:|--:|',
          ...mixed,
          '',
        ]
      : []),
    `Service peak RSS under the load: ${fmt(o.peakRssMb, 0)} MB (${fmt(o.warmRssMb, 0)} MB by the end of the warm-up; ` +
      `${fmt(o.setupRssMb, 0)} MB during the setup's concurrent log-ins, scrypt taking 32 MiB each).`,
    '',
    '| target | measured | goal | |',
    '|---|--:|--:|---|',
    ...checks.map(
      (c) =>
        `| ${c.what} | ${c.value} | ${c.goal} | ${c.skipped ? 'not measured' : c.info ? `(not a target) ${c.met ? 'holds' : 'does not hold'}` : c.met ? 'met' : '**missed**'} |`,
    ),
    '',
    // Twins are named by their suffix, and the peer's requests are in the hand-written table "The peer".
    'Scenarios (twins left out: `-uncached` is its scenario straight to the service, `-10k-` on the 10 000-post ' +
      'database, `-platformatic` its request on the peer, as the table "The peer" gives it):',
    '',
    ...o.scenarios
      .filter((s) => !s.id.endsWith('-platformatic') && !s.title.startsWith('same,'))
      .map((s) => `- \`${s.id}\`: ${s.title}`),
    END,
  ].join('\n');

  const existing = existsSync(file) ? await readFile(file, 'utf8') : '';
  const at = existing.indexOf(START);
  const until = existing.indexOf(END);
  const text =
    at >= 0 && until > at
      ? existing.slice(0, at) + section + existing.slice(until + END.length)
      : `# Benchmark results\n\nWritten by \`npm run bench\` between the markers below; the rest is by hand.\n\n${section}\n`;
  await writeFile(file, text);

  return {
    failedRequests,
    line:
      `bench ${o.smoke ? 'smoke' : 'full'}: ${o.scenarios.length} scenarios × ${o.rounds} round(s), ${requests} requests, ` +
      `${failedRequests} errors/non-2xx, targets met ${met}/${targets.length}, peak RSS ${fmt(o.peakRssMb, 0)} MB — ${failedRequests ? 'FAILED' : 'ok'}`,
  };
}
