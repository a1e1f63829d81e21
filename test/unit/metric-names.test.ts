/**
 * Every metric the alert rules and the operations guide name is written whole in src/, so that grepping a name from
 * an alert lands on the code that serves it: no name built from a template or by concatenation.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const METRIC = /\b(?:posts_api|http_request)_[a-z0-9_]*[a-z0-9]\b/g;
// Series prom-client derives from a histogram's name: the name is what src must hold.
const HISTOGRAM_SERIES = /_(?:bucket|count|sum)$/;

/** The expressions of deploy/prometheus/rules.yml: `expr:` on one line, or a block (`expr: |`) indented under it. */
function ruleExpressions(yaml: string): string[] {
  const lines = yaml.split('\n');
  const expressions: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    // `indent`: up to the key, past a list item's dash; a block's lines are indented further.
    const match = /^(\s*(?:- )?)expr:\s*(.*)$/.exec(lines[i]!);
    if (!match) continue;
    const [, indent = '', value = ''] = match;
    if (!/^[|>]/.test(value)) {
      expressions.push(value);
      continue;
    }
    const block: string[] = [];
    while (i + 1 < lines.length && (lines[i + 1]!.trim() === '' || lines[i + 1]!.search(/\S/) > indent.length)) {
      block.push(lines[++i]!);
    }
    expressions.push(block.join('\n'));
  }
  return expressions;
}

/** The text of a Markdown section, from its heading to the next heading of its level or above. */
function section(markdown: string, heading: string): string {
  const start = markdown.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`no section ${heading}`);
  const level = /^#+/.exec(heading)![0].length;
  const rest = markdown.slice(start + heading.length + 2);
  const end = rest.search(new RegExp(`^#{1,${level}} `, 'm'));
  return end < 0 ? rest : rest.slice(0, end);
}

const namesIn = (text: string): string[] => [...new Set(text.match(METRIC) ?? [])].sort();

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}
const source = sourceFiles('src').map((file) => readFileSync(file, 'utf8'));

/** The metric's own name (a histogram's for its series), quoted whole in some file of src/, or undefined. */
function missingFromSource(series: string): string | undefined {
  const candidates = [series, series.replace(HISTOGRAM_SERIES, '')];
  const whole = (name: string) => new RegExp(`['"\`]${name}['"\`]`);
  return candidates.some((name) => source.some((text) => whole(name).test(text))) ? undefined : series;
}

describe('metric names', () => {
  it('reads the expressions of the alert rules, one-line and block ones', () => {
    const yaml = 'rules:\n  - expr: a_total > 1\n    for: 5m\n  - expr: |\n      sum(b)\n        / c\n    for: 1m\n';
    expect(ruleExpressions(yaml)).toEqual(['a_total > 1', '      sum(b)\n        / c']);
  });

  it('every metric the alert rules use is named whole in src/', () => {
    const expressions = ruleExpressions(readFileSync('deploy/prometheus/rules.yml', 'utf8'));
    const names = namesIn(expressions.join('\n'));
    expect(names).toEqual(
      expect.arrayContaining([
        'http_request_duration_seconds_count',
        'posts_api_webhook_oldest_due_seconds',
        'posts_api_events_unnumbered_oldest_seconds',
        'posts_api_db_replica_lag_seconds',
        'posts_api_db_pool_waiting',
      ]),
    );
    expect(names.map(missingFromSource).filter(Boolean)).toEqual([]);
  });

  it("every metric docs/operations.md's Metrics section names is named whole in src/", () => {
    const names = namesIn(section(readFileSync('docs/operations.md', 'utf8'), '## Metrics'));
    expect(names.length).toBeGreaterThanOrEqual(15);
    expect(names.map(missingFromSource).filter(Boolean)).toEqual([]);
  });
});
