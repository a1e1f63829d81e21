/**
 * What docs/operations.md and docs/api.md tell an operator holds: every variable they name is a setting the service
 * reads (src/config.ts), one docker-compose.yml reads, OpenTelemetry's, or a constant the code exports under that
 * name (never a setting that does not exist); the metrics endpoint operations.md documents is not denied in it; and the
 * ports README.md says `npm start` opens are the defaults of src/config.ts.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { EnvSchema } from '../../src/config.js';

const settings = new Set(Object.keys(EnvSchema.properties));
const composeVariables = new Set(
  [...readFileSync('docker-compose.yml', 'utf8').matchAll(/\$\{([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]!),
);
const sources = readdirSync('src', { recursive: true, encoding: 'utf8' })
  .filter((file) => file.endsWith('.ts'))
  .map((file) => readFileSync(join('src', file), 'utf8'))
  .join('\n');
const exported = (name: string) => new RegExp(`export const ${name}\\b`).test(sources);

const known = (name: string) =>
  settings.has(name) || composeVariables.has(name) || name.startsWith('OTEL_') || exported(name);

it.each(['docs/operations.md', 'docs/api.md'])(
  '%s names only settings, Compose variables, OpenTelemetry variables and exported constants',
  (file) => {
    // Upper case with an underscore, in backticks: how the docs write a variable (UPDATE or HIT are no variables).
    const named = [...readFileSync(file, 'utf8').matchAll(/`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`/g)].map((m) => m[1]!);
    expect(named.length).toBeGreaterThan(0);
    expect([...new Set(named.filter((name) => !known(name)))]).toEqual([]);
  },
);

it('docs/operations.md documents GET /metrics and nowhere says there is none', () => {
  const text = readFileSync('docs/operations.md', 'utf8');
  expect(text).toMatch(/^## Metrics$/m);
  expect(settings.has('METRICS_PORT')).toBe(true);
  const sentences = text.replace(/\s+/g, ' ').split(/(?<=\.)\s/);
  expect(sentences.filter((sentence) => /no metrics endpoint/i.test(sentence))).toEqual([]);
});

it("README.md says which ports npm start opens, with src/config.ts's defaults", () => {
  const readme = readFileSync('README.md', 'utf8').replace(/\s+/g, ' ');
  const line = /`npm start` opens three ports[^.]*\./.exec(readme)?.[0];
  expect(line).toBeDefined();
  const properties = EnvSchema.properties as Record<string, { default?: unknown }>;
  for (const setting of ['PORT', 'METRICS_PORT', 'EMBEDDED_PG_PORT'])
    expect(line, setting).toContain(`${String(properties[setting]!.default)} (\`${setting}\`)`);
});
