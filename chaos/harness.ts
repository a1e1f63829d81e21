/** The fault scenarios' harness, loaded by chaos/run.ts once the command line is parsed. */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { flags } from './command.js';
import { BOUND_MS } from './load.js';
import {
  cleanUpAll,
  cleanupMark,
  log,
  netemAvailable,
  OUT,
  prepareTemplate,
  ROOT,
  STATEMENT_TIMEOUT_MS,
  tempRoot,
} from './procs.js';
import {
  databaseCrash,
  exhaustion,
  failover,
  network,
  serviceCrash,
  soak,
  type Plan,
  type Result,
} from './scenarios.js';

const plan: Plan = { short: flags.short === true };
const only = flags.only?.split(',').map((s) => s.trim());

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: cleaning up`);
    void cleanUpAll().finally(() => process.exit(130));
  });
}

const scenarios: { id: string; run: (netem: boolean) => Promise<Result | Result[]> }[] = [
  { id: '1', run: () => databaseCrash(plan) },
  { id: '2', run: () => serviceCrash(plan) },
  { id: '5', run: () => exhaustion(plan) },
  { id: '3a', run: () => failover(plan, true) },
  { id: '3b', run: () => failover(plan, false) },
  { id: '4', run: (netem) => network(plan, netem) },
  { id: '6', run: () => soak(plan) },
];

async function main(): Promise<number> {
  if (process.getuid?.() !== 0)
    throw new Error('run as root: PostgreSQL runs as the postgres user, and the WAL fault mounts a tmpfs');
  if (!flags['no-build']) {
    log('npm run build');
    execFileSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'inherit' });
  }
  mkdirSync(OUT, { recursive: true });
  tempRoot();
  log('a template cluster with the migrated database');
  await prepareTemplate();
  const netem = await netemAvailable();
  log(`netem ${netem ? 'available' : 'not available in this kernel: network faults go through a userspace proxy'}`);
  const results: Result[] = [];
  for (const scenario of scenarios) {
    if (stopping) break;
    if (only && !only.some((o) => scenario.id.startsWith(o))) continue;
    log(`scenario ${scenario.id}`);
    const mark = cleanupMark();
    const began = Date.now();
    try {
      const out = await scenario.run(netem);
      for (const r of Array.isArray(out) ? out : [out]) results.push(r);
    } catch (error) {
      results.push({
        id: scenario.id,
        title: `scenario ${scenario.id}`,
        checks: [{ what: 'the scenario ran to its end', ok: false, detail: (error as Error).message }],
        seen: [],
        notes: [],
        error: (error as Error).stack,
      });
    } finally {
      await cleanUpAll(mark);
    }
    for (const r of results.filter((r) => r.id.startsWith(scenario.id))) {
      const failed = r.checks.filter((c) => !c.ok);
      log(
        `  ${r.id}: ${failed.length ? `FAILED ${failed.map((c) => `${c.what}${c.detail ? ` (${c.detail})` : ''}`).join('; ')}` : 'passed'} (${((Date.now() - began) / 1000).toFixed(0)} s)`,
      );
    }
  }
  const file = plan.short ? join(OUT, 'RESULTS.md') : join(ROOT, 'chaos', 'RESULTS.md');
  writeResults(file, results, netem);
  const failed = results.filter((r) => r.checks.some((c) => !c.ok));
  log(`${results.length - failed.length} passed, ${failed.length} failed; results in ${file.slice(ROOT.length + 1)}`);
  return failed.length ? 1 : 0;
}

const START = '<!-- chaos:results:start -->';
const END = '<!-- chaos:results:end -->';
const ms = (n: number | undefined) => (n === undefined ? '–' : String(Math.round(n)));

function writeResults(file: string, results: Result[], netem: boolean): void {
  const rows = results.map((r) => {
    const v = r.verdict;
    const f = r.figures;
    const ok = r.checks.every((c) => c.ok);
    const fiveXx = f
      ? Object.entries(f.statuses)
          .filter(([k]) => k.startsWith('5'))
          .map(([k, n]) => `${k}: ${n}`)
          .join(', ') || '0'
      : '–';
    return `| ${r.id} | ${r.title} | ${v?.sent ?? '–'} | ${v?.acknowledged ?? '–'} | ${v ? v.lost.length : '–'} | ${v ? v.duplicated.length : '–'} | ${fiveXx} | ${f ? f.cutOff : '–'} | ${f ? f.overBound : '–'} | ${f ? f.unavailableS.toFixed(1) : '–'} | ${f ? `${ms(f.p99.before)} / ${ms(f.p99.during)} / ${ms(f.p99.after)}` : '–'} | ${f?.recoveryS === undefined ? '–' : f.recoveryS.toFixed(2)} | ${ok ? 'passed' : '**FAILED**'} |`;
  });
  const details = results.map((r) => {
    const lines = [`### ${r.id}. ${r.title}`, ''];
    for (const c of r.checks)
      lines.push(`- ${c.ok ? '✓' : '✗ **FAILED**:'} ${c.what}${c.detail ? ` — ${c.detail}` : ''}`);
    if (r.verdict) {
      const v = r.verdict;
      lines.push(
        `- unacknowledged writes that had committed: ${v.committedUnacknowledged}; keyed writes retried with their key: ${v.keyedRetried} (${v.keyedReplayed} replayed the first attempt's answer)${v.orphaned ? `; ${v.orphaned} retried comments answered 404 as their post was one of the lost writes` : ''}`,
      );
    }
    if (r.figures) {
      const errors = Object.entries(r.figures.errors).map(([k, n]) => `${n} × ${k}`);
      if (errors.length) lines.push(`- 5xx answers: ${errors.join('; ')}`);
      lines.push(
        `- every answer: ${Object.entries(r.figures.statuses)
          .map(([k, n]) => `${k}: ${n}`)
          .join(', ')}; slowest ${Math.round(r.figures.slowest)} ms`,
      );
    }
    for (const n of r.notes) lines.push(`- ${n}`);
    if (r.seen.length) lines.push('', 'What an operator saw:', '', ...r.seen.map((s) => `- ${s}`));
    if (r.error) lines.push('', '```', r.error.split('\n').slice(0, 6).join('\n'), '```');
    return lines.join('\n');
  });
  const body = [
    START,
    '',
    `Run of ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC${plan.short ? ' (`--short`)' : ''}; statement timeout ${STATEMENT_TIMEOUT_MS} ms, request bound ${BOUND_MS} ms; network faults through ${netem ? 'tc netem' : 'a userspace TCP proxy (no netem in this kernel)'}.`,
    '',
    '| # | fault | requests sent (writes) | acknowledged | lost | duplicated | 5xx (all requests) | cut off | over bound | s unavailable | p99 ms before / during / after | recovery s | verdict |',
    '|---|---|--:|--:|--:|--:|---|--:|--:|--:|---|--:|---|',
    ...rows,
    '',
    ...details.flatMap((d) => [d, '']),
    END,
  ].join('\n');
  const previous = existsSync(file) ? readFileSync(file, 'utf8') : '';
  const at = previous.indexOf(START);
  const until = previous.indexOf(END);
  const text =
    at >= 0 && until > at
      ? previous.slice(0, at) + body + previous.slice(until + END.length)
      : `# Chaos results\n\n${body}\n`;
  writeFileSync(file, text);
}

main()
  .then(async (code) => {
    await cleanUpAll();
    process.exit(code);
  })
  .catch(async (error: Error) => {
    console.error(error);
    await cleanUpAll();
    process.exit(1);
  });
