/**
 * Variants: other builds of the service, each from a git ref, run beside the
 * main one to measure what a change moves (an ablation: a branch that removes
 * one mechanism). `--variant name=ref` checks the ref out in a worktree under
 * bench/out/variants/<name>, installs its dependencies (a symlink to this
 * checkout's node_modules when package-lock.json is the same, else `npm ci`),
 * builds it, and gives it a data set made by its own migrations and seed:
 * the main one when those are the same as this checkout's, else a database
 * of its own named by their hash (reused by later runs). The worktrees are
 * removed at the end of the run.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { ensureDataset, SHAPE, type BenchServer, type Dataset, type Recipe } from './dataset.js';
import { OUT, ROOT, run, type Child } from './processes.js';

export interface VariantSpec {
  name: string;
  ref: string;
  /** `:cache`: runs the edge's scenarios (a build with its own response cache, e.g. b9065ea); else those straight to the service. */
  cache: boolean;
  /** Settings of its own (`METRICS_PORT=0`: the same build without metrics). */
  env: Record<string, string>;
}

export interface Variant extends VariantSpec {
  /** The commit the ref named, abbreviated. */
  commit: string;
  dir: string;
  dataset?: Dataset;
  child?: Child;
}

/** `name=ref[:cache] [KEY=value]…` (a git ref cannot contain a colon or a space). */
export function parseVariant(text: string): VariantSpec {
  const match = /^([a-z0-9][a-z0-9-]{0,30})=([^:\s]+)(:cache)?((?:\s+[A-Z][A-Z0-9_]*=\S*)*)$/.exec(text.trim());
  if (!match) {
    throw new Error(`--variant ${text}: expected name=git-ref[:cache] [KEY=value]… (name: a-z, 0-9 and -)`);
  }
  const env = Object.fromEntries(
    match[4]!
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map((kv) => kv.split(/=(.*)/s, 2)),
  );
  return { name: match[1]!, ref: match[2]!, cache: match[3] !== undefined, env };
}

const git = (args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

const worktree = (spec: VariantSpec) => join(OUT, 'variants', spec.name);

/** A worktree of the ref, with its dependencies, built (`npm run build`). */
export async function checkOut(spec: VariantSpec, log: (msg: string) => void): Promise<Variant> {
  let commit: string;
  try {
    commit = git(['rev-parse', '--verify', '--quiet', `${spec.ref}^{commit}`]);
  } catch {
    throw new Error(`--variant ${spec.name}=${spec.ref}: no such commit`);
  }
  const dir = worktree(spec);
  // A leftover of an interrupted run goes first.
  await removeWorktree(dir);
  await run('git', ['worktree', 'add', '--detach', '--force', dir, commit], { quiet: true });
  const lock = (root: string) => readFileSync(join(root, 'package-lock.json'), 'utf8');
  if (lock(dir) === lock(ROOT)) {
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  } else {
    log(`variant ${spec.name}: its package-lock.json differs from this checkout's: npm ci`);
    await run('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir });
  }
  await run('npm', ['run', '-s', 'build'], { cwd: dir });
  log(`variant ${spec.name}: ${spec.ref} (${commit.slice(0, 10)}) built in bench/out/variants/${spec.name}`);
  return { ...spec, commit: commit.slice(0, 10), dir };
}

async function removeWorktree(dir: string): Promise<void> {
  if (existsSync(dir)) await run('git', ['worktree', 'remove', '--force', dir], { quiet: true }).catch(() => undefined);
  // What git did not know as its own (a build interrupted half-way); the node_modules symlink is removed, not followed.
  rmSync(dir, { recursive: true, force: true });
  await run('git', ['worktree', 'prune'], { quiet: true });
}

/** Unregisters and deletes the variants' worktrees, whether made or half-made (their data sets stay, for the next run). */
export async function removeVariants(variants: VariantSpec[]): Promise<void> {
  for (const v of variants) await removeWorktree(worktree(v));
}

/** A hash of a checkout's migrations and seed: checkouts with the same hash make the same data set. */
function recipeKey(root: string): string {
  const hash = createHash('sha256');
  const migrations = join(root, 'migrations');
  for (const file of readdirSync(migrations).sort()) hash.update(file).update(readFileSync(join(migrations, file)));
  // The seed moved from src/db to src/dev; a ref may have either.
  for (const file of ['src/dev/seed.ts', 'src/dev/seed-rows.ts', 'src/db/seed.ts']) {
    if (existsSync(join(root, file))) hash.update(file).update(readFileSync(join(root, file)));
  }
  return hash.digest('hex').slice(0, 12);
}

/** A checkout's own migrations and seed, through its CLI (`npm run migrate`, `npm run seed`). */
function cliRecipe(dir: string, key: string): Recipe {
  // Nothing of the bench's environment: the CLI reads DATABASE_URL and its defaults.
  const env = (url: string) => ({ PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', DATABASE_URL: url });
  return {
    shape: `${SHAPE}; migrations and seed ${key}`,
    migrate: (url) => run('npm', ['run', '-s', 'migrate'], { cwd: dir, env: env(url) }),
    seed: async (url, size, log) => {
      const started = performance.now();
      log(`${new URL(url).pathname.slice(1)}: seeding with the variant's npm run seed`);
      const counts = [
        '--posts',
        String(size.posts),
        '--comments',
        String(size.comments),
        '--users',
        String(size.users),
      ];
      await run('npm', ['run', '-s', 'seed', '--', ...counts], { cwd: dir, env: env(url) });
      return { seconds: (performance.now() - started) / 1000, mode: "the variant's npm run seed" };
    },
  };
}

/** The variant's data set: the main one when its migrations and seed are this checkout's, else its own. */
export async function variantDataset(
  v: Variant,
  server: BenchServer,
  main: Dataset,
  log: (msg: string) => void,
): Promise<Dataset> {
  const key = recipeKey(v.dir);
  if (key === recipeKey(ROOT)) return main;
  log(`variant ${v.name}: its migrations or seed differ from this checkout's (${key})`);
  return ensureDataset(server, `${main.name}_${key}`, main.size, log, cliRecipe(v.dir, key));
}
