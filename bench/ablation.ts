/**
 * The ablation: each variant (bench/variants.ts) runs the chosen scenarios of
 * its kind, right between two runs of the main instance (and of the peer's
 * twin, when the scenario has one), and the report compares it with both.
 */
import { drive } from './load.js';
import { fmt, median, times, type Check, type Sample, type Scenario } from './report.js';
import type { Context } from './scenarios.js';
import type { Variant, VariantSpec } from './variants.js';

export interface Ablation {
  variants: { name: string; ref: string; commit: string; cache: boolean; database: string }[];
  /** The run's scenarios, in its order. */
  scenarios: Scenario<Context>[];
  /** By `${variant} ${scenario}`: its samples, each with the req/s of the main instance (mainRps) and of the peer (twinRps) around it. */
  samples: Map<string, Sample[]>;
  /** The main instance's and the peer's runs around them, for their errors. */
  brackets: Sample[];
}

/** A `:cache` variant (a build with its own response cache) runs the edge's scenarios; the others, those straight to the service. */
export const runsOn = (v: VariantSpec, s: Scenario<Context>) => s.on === (v.cache ? 'edge' : 'big');

/**
 * One round of scenario `s` on every variant that runs it: main, peer, V1,
 * peer, main, V2, main, peer, …: the bracket's order alternates, so the main
 * instance and the peer each run as far before a variant as after it, and a
 * drift of the machine's speed cancels out of the ratios as in the main table.
 */
export async function ablate(
  s: Scenario<Context>,
  variants: Variant[],
  ctx: Context,
  seconds: number,
  ablation: Ablation,
  /** Logs a sample as it is measured, and then each variant's ratios. */
  show: (id: string, sample: Sample) => void,
  note: (text: string) => void,
): Promise<void> {
  const chosen = variants.filter((v) => runsOn(v, s));
  if (chosen.length === 0) return;
  const bracket = [s, ...(s.twin && ctx.peer ? [s.twin] : [])];
  const measure = async () => {
    const samples = new Map<string, Sample>();
    for (const x of bracket) {
      samples.set(x.id, await drive(x, ctx, seconds));
      show(`${x.id} (around)`, samples.get(x.id)!);
    }
    ablation.brackets.push(...samples.values());
    return samples;
  };
  let before = await measure();
  for (const v of chosen) {
    const sample = await drive(s, ctx, seconds, v.child);
    show(`${v.name}/${s.id}`, sample);
    bracket.reverse();
    const after = await measure();
    const mean = (id: string) => (before.has(id) ? (before.get(id)!.rps + after.get(id)!.rps) / 2 : undefined);
    sample.mainRps = mean(s.id);
    sample.twinRps = s.twin ? mean(s.twin.id) : undefined;
    const id = `${v.name} ${s.id}`;
    ablation.samples.set(id, [...(ablation.samples.get(id) ?? []), sample]);
    note(
      `${v.name}/${s.id}: × main ${times(sample.rps / sample.mainRps!)}, × Platformatic ${times(sample.twinRps ? sample.rps / sample.twinRps : NaN)}`,
    );
    before = after;
  }
}

/** The ablation's part of bench/RESULTS.md, its targets, and the failed requests it saw. */
export function ablationSection(a: Ablation): { lines: string[]; failed: number; requests: number; checks: Check[] } {
  const rows: string[] = [];
  const checks: Check[] = [];
  let failed = a.brackets.reduce((n, x) => n + x.errors + x.non2xx, 0);
  let requests = a.brackets.reduce((n, x) => n + x.requests, 0);
  for (const v of a.variants) {
    for (const { id, variantTarget } of a.scenarios) {
      const samples = a.samples.get(`${v.name} ${id}`);
      if (!samples) continue;
      if (v.cache && variantTarget !== undefined) {
        const vs = median(samples.map((x) => x.mainRps! / x.rps));
        checks.push({
          what: `${id}: req/s through the edge vs \`${v.name}\`'s in-process cache (${v.ref})`,
          value: times(vs),
          goal: `≥ ${variantTarget.toFixed(1)}×`,
          met: vs >= variantTarget,
        });
      }
      const errors = samples.reduce((n, x) => n + x.errors + x.non2xx + (x.background?.unexpected ?? 0), 0);
      failed += errors;
      requests += samples.reduce((n, x) => n + x.requests, 0);
      const of = (pick: (x: Sample) => number | undefined) => median(samples.map((x) => pick(x) ?? NaN));
      rows.push(
        `| ${v.name} | ${id} | ${fmt(of((x) => x.rps))} | ${fmt(
          of((x) => x.cpuMsPerRequest),
          3,
        )} | ${fmt(
          of((x) => x.dbCpuMsPerRequest),
          3,
        )} | ${fmt(of((x) => x.walBytesPerRequest))} | ` +
          `${fmt(of((x) => x.mainRps))} | ${times(of((x) => x.rps / x.mainRps!))} | ${times(of((x) => (x.twinRps ? x.rps / x.twinRps : NaN)))} | ${errors} |`,
      );
    }
  }
  const lines = [
    '### Ablation: variants beside the main instance',
    '',
    ...a.variants.map(
      (v) =>
        `- \`${v.name}\`: ${v.ref} (${v.commit}), its own settings' defaults, ${v.cache ? 'straight, beside the edge scenarios (its response cache against the edge)' : 'beside the scenarios straight to the service'}, on ${v.database}`,
    ),
    '',
    'Each variant runs each scenario right between two runs of the main instance (for an edge scenario: nginx in front of it) and, when the scenario has one, of its Platformatic twin ' +
      '(main, peer, variant, peer, main, next variant, main, peer, …), every round. × main and × Platformatic: its req/s over the mean of those ' +
      "two runs (median of the per-round ratios); main req/s: that mean. CPU ms/req: the variant process; DB CPU ms/req: all PostgreSQL processes; WAL B/req: the cluster's WAL per request.",
    '',
    '| variant | scenario | req/s | CPU ms/req | DB CPU ms/req | WAL B/req | main req/s | × main | × Platformatic | errors + non-2xx |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...rows,
    '',
  ];
  return { lines, failed, requests, checks };
}
