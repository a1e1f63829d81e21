/**
 * `npm run bench -- --help` and `npm run chaos -- --help` answer before their
 * harness loads: what the entry points import statically (before their
 * `await import` of the harness) is the command line alone, no package. On a
 * loaded machine the whole harness through tsx took over 30 s.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Every file and package reached from `entry` by static imports (type-only ones aside). */
function staticImports(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = readFileSync(join(ROOT, file), 'utf8');
    for (const [, specifier] of text.matchAll(/^import (?!type )(?:[^'"]*? from )?'([^']+)';$/gms)) {
      if (specifier!.startsWith('node:')) continue;
      if (!specifier!.startsWith('.')) seen.add(specifier!);
      else visit(relative(ROOT, resolve(ROOT, dirname(file), specifier!.replace(/\.js$/, '.ts'))));
    }
  };
  visit(entry);
  return [...seen].sort();
}

describe('the bench and chaos entry points', () => {
  it.each([
    ['bench/run.ts', ['bench/command.ts', 'bench/run.ts', 'src/command-line.ts']],
    ['chaos/run.ts', ['chaos/command.ts', 'chaos/run.ts', 'src/command-line.ts']],
  ])('%s imports only its command line before the harness', (entry, files) => {
    expect(staticImports(entry)).toEqual(files);
  });
});
