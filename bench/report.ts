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

export interface Scenario<C> {
  id: string;
  title: string;
  on: 'big' | 'bigUncached' | 'small' | 'baseline';
  /** The same URL again and again on the production service: answered by the response cache. */
  cached?: boolean;
  method: 'GET' | 'POST';
  path: (ctx: C) => string;
  /** Each request draws a post id and puts it in place of ":id" in the path. */
  randomPostId?: boolean;
  authenticated?: boolean;
  /** Minimum req/s as a fraction of the HTTP ceiling. */
  target?: number;
}

export interface Sample {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  errors: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  cpuMsPerRequest: number;
  dbCpuMsPerRequest: number;
  /** req/s of the HTTP ceiling measured right before this sample (scenarios with a target). */
  ceilingRps?: number;
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
  /** The big data set's instance with the cache off. */
  uncachedPeakRssMb: number;
  ctx: { author: { id: number; page: number }; popularPost: number; deepCursor: number; secondCursor: number; deepPage: number };
  machine: string;
}

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';
const RSS_LIMIT_MB = 150;

function median(values: number[]): number {
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

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a');
const pct = (n: number) => (Number.isFinite(n) ? `${(n * 100).toFixed(0)} %` : 'n/a');

interface Check {
  what: string;
  value: string;
  goal: string;
  met: boolean;
  /** Not one of the issue's targets: shown to explain one. */
  info?: boolean;
}

export async function writeResults(file: string, o: Outcome): Promise<{ line: string; failedRequests: number }> {
  const rps = (id: string) => o.http.get(id)?.map((s) => s.rps);
  const ceiling = rps('ceiling');
  const rows: string[] = [];
  const checks: Check[] = [];
  let failedRequests = 0;
  let requests = 0;

  for (const s of o.scenarios) {
    const samples = o.http.get(s.id) ?? [];
    const errors = samples.reduce((n, x) => n + x.errors + x.non2xx, 0);
    failedRequests += errors;
    requests += samples.reduce((n, x) => n + x.requests, 0);
    const pgb = o.db.get(s.id);
    const paired = samples.every((x) => x.ceilingRps !== undefined);
    const vsHttp =
      s.id === 'ceiling' ? 1 : paired && samples.length ? median(samples.map((x) => x.rps / x.ceilingRps!)) : ratio(rps(s.id), ceiling);
    const vsDb = ratio(rps(s.id), pgb?.map((x) => x.tps));
    rows.push(
      `| ${s.id} | ${fmt(median(samples.map((x) => x.rps)))} | ${fmt(median(samples.map((x) => x.p50)), 1)} | ${fmt(median(samples.map((x) => x.p99)), 1)} | ` +
        `${fmt(median(samples.map((x) => x.cpuMsPerRequest)), 3)} | ${s.on === 'baseline' ? '–' : fmt(median(samples.map((x) => x.dbCpuMsPerRequest)), 3)} | ` +
        `${pct(vsHttp)} | ${pgb ? fmt(median(pgb.map((x) => x.tps))) : '–'} | ${pgb ? `${fmt(median(pgb.map((x) => x.p50)), 2)} / ${fmt(median(pgb.map((x) => x.p99)), 2)}` : '–'} | ` +
        `${pgb ? pct(vsDb) : '–'} | ${errors} |`,
    );
    if (s.target !== undefined) {
      checks.push({ what: `${s.id}: req/s vs HTTP ceiling`, value: pct(vsHttp), goal: `≥ ${pct(s.target)}`, met: vsHttp >= s.target });
    }
  }

  const deep = ratio(rps('cursor-deep'), rps('cursor-first'));
  checks.push({ what: 'cursor page 500 000 deep vs first cursor page (req/s)', value: fmt(deep, 2), goal: '≥ 0.90', met: deep >= 0.9 });
  const deepUncached = ratio(rps('cursor-deep-uncached'), rps('cursor-first-uncached'));
  checks.push({
    what: 'the same, cache off: every request runs its SQL',
    value: fmt(deepUncached, 2),
    goal: '≥ 0.90',
    met: deepUncached >= 0.9,
    info: true,
  });
  const depth = ratio(rps('cursor-deep-uncached'), rps('cursor-second-uncached'));
  checks.push({
    what: 'cache off: cursor page 500 000 deep vs the second cursor page, the same query (req/s)',
    value: fmt(depth, 2),
    goal: '≥ 0.90',
    met: depth >= 0.9,
    info: true,
  });
  // Cache off on both sides: what is compared is the database's work for the total.
  const sizeFree = ratio(rps('list-first-uncached'), rps('list-first-10k-uncached'));
  checks.push({
    what: `first offset page with total, cache off: ${fmt(o.datasets.big.size.posts)} vs ${fmt(o.datasets.small.size.posts)} posts (req/s)`,
    value: fmt(sizeFree, 2),
    goal: '≥ 0.80',
    met: sizeFree >= 0.8,
  });
  checks.push({ what: 'service peak RSS (VmHWM) under this load', value: `${fmt(o.peakRssMb, 0)} MB`, goal: `≤ ${RSS_LIMIT_MB} MB`, met: o.peakRssMb <= RSS_LIMIT_MB });
  checks.push({ what: 'errors, timeouts and non-2xx answers', value: String(failedRequests), goal: '0', met: failedRequests === 0 });

  const seedLine = (d: Dataset) =>
    d.seeded
      ? `seeded in this run: ${d.seeded.seconds.toFixed(1)} s (${d.seeded.mode}), then VACUUM ANALYZE ${d.seeded.vacuumSeconds.toFixed(1)} s`
      : 'reused from an earlier run';
  const targets = checks.filter((c) => !c.info);
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
    `- author ${o.ctx.author.id} (page ${o.ctx.author.page}), popular post ${o.ctx.popularPost}, cursor after id ${o.ctx.deepCursor} (second page: after ${o.ctx.secondCursor}), offset page ${o.ctx.deepPage}`,
    '',
    'Scenarios without "-uncached" run on the service as deployed (response cache on); those marked cached repeat one URL, ' +
      'so the cache answers them and no pgbench runs for them (their twin with the cache off has it). ' +
      'Medians over the rounds. CPU ms/req: user+system CPU of the service process (or of the baseline, for `ceiling`) per request; ' +
      'DB CPU ms/req: of all PostgreSQL processes on the machine. × HTTP: req/s as a share of the ceiling measured right before it ' +
      '(scenarios with a target) or else in the same round; ' +
      '× DB: req/s as a share of pgbench running the same SQL.',
    '',
    '| scenario | req/s | p50 ms | p99 ms | CPU ms/req | DB CPU ms/req | × HTTP ceiling | pgbench tps | pgbench p50 / p99 ms | × DB ceiling | errors + non-2xx |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...rows,
    '',
    `Service peak RSS under the load: ${fmt(o.peakRssMb, 0)} MB (${fmt(o.warmRssMb, 0)} MB by the end of the warm-up; ` +
      `${fmt(o.setupRssMb, 0)} MB during the setup's concurrent log-ins, scrypt taking 32 MiB each); the instance with the cache off: ${fmt(o.uncachedPeakRssMb, 0)} MB.`,
    '',
    '| target | measured | goal | |',
    '|---|--:|--:|---|',
    ...checks.map((c) => `| ${c.what} | ${c.value} | ${c.goal} | ${c.info ? `(not a target) ${c.met ? 'holds' : 'does not hold'}` : c.met ? 'met' : '**missed**'} |`),
    '',
    'Scenarios:',
    '',
    ...o.scenarios.map((s) => `- \`${s.id}\`: ${s.title}`),
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
