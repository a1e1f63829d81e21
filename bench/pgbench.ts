/**
 * The database ceiling: pgbench running, for each scenario, exactly the SQL
 * the service sends for one such request. That SQL is not written by hand: one
 * request per scenario goes through the production app in this process with
 * the pool's query methods recorded, and the statements become a pgbench
 * script (bench/sql/<scenario>.sql). Numbers stay bound parameters of named
 * prepared statements (pgbench -M prepared, as the service's pool sends them);
 * a random post id becomes
 * `\set id random(...)` (a random page: its offset, `\set drawn (:id - 1) * 20`);
 * strings are inlined as literals.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { SESSION_OPTIONS } from '../src/db/pool.js';

export interface CapturedQuery {
  text: string;
  values: unknown[];
}

/** Records every statement sent through the pool (and its checked-out clients) while `fn` runs. */
export async function captureQueries(pool: pg.Pool, fn: () => Promise<unknown>): Promise<CapturedQuery[]> {
  const captured: CapturedQuery[] = [];
  const record = (args: unknown[]) => {
    const [first, second] = args;
    if (typeof first === 'string') captured.push({ text: first, values: (second as unknown[] | undefined) ?? [] });
    else if (first && typeof first === 'object' && 'text' in first) {
      const q = first as { text: string; values?: unknown[] };
      captured.push({ text: q.text, values: q.values ?? (second as unknown[] | undefined) ?? [] });
    }
  };
  const wrap = <T extends { query: (...a: never[]) => unknown }>(target: T) => {
    const original = target.query;
    target.query = function (this: T, ...args: unknown[]) {
      record(args);
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    } as T['query'];
    return () => {
      target.query = original;
    };
  };
  const restoreQuery = wrap(pool);
  const originalConnect = pool.connect;
  const restores: (() => void)[] = [];
  pool.connect = function (this: pg.Pool, ...args: unknown[]) {
    // pool.query checks out a client with a callback: that statement is recorded already.
    if (args.length > 0) return (originalConnect as (...a: unknown[]) => unknown).apply(this, args);
    return (originalConnect as () => Promise<pg.PoolClient>).call(this).then((client) => {
      restores.push(wrap(client));
      return client;
    });
  } as typeof pool.connect;
  try {
    await fn();
  } finally {
    restoreQuery();
    pool.connect = originalConnect;
    for (const restore of restores) restore();
  }
  return captured;
}

function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Buffer.isBuffer(value)) return `'\\x${value.toString('hex')}'`;
  if (value instanceof Date) return `'${value.toISOString()}'`;
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  // pgbench reads `:name` as a variable even inside quotes.
  if (/:[A-Za-z_]/.test(text))
    throw new Error(`pgbench script: a literal must not contain ":name": ${text.slice(0, 40)}`);
  return `'${text.replace(/'/g, "''")}'`;
}

export interface ScriptOptions {
  /** Header comment: what request this SQL serves. */
  title: string;
  /**
   * A parameter equal to `value` becomes :id, drawn from `range` per transaction; with `expression`
   * (of :id), it becomes :drawn, set to that expression of the :id drawn.
   */
  randomId?: { value: number; range: [number, number]; expression?: string | undefined };
}

export function pgbenchScript(queries: CapturedQuery[], options: ScriptOptions): string {
  const sets: string[] = [];
  const drawn = options.randomId?.expression ? ':drawn' : ':id';
  if (options.randomId) sets.push(`\\set id random(${options.randomId.range[0]}, ${options.randomId.range[1]})`);
  if (options.randomId?.expression) sets.push(`\\set drawn ${options.randomId.expression}`);
  let n = 0;
  let draws = 0;
  const statements = queries.map(({ text, values }) => {
    const render = (value: unknown): string => {
      if (options.randomId && value === options.randomId.value) {
        draws += 1;
        return drawn;
      }
      if (typeof value === 'number' && Number.isFinite(value)) {
        n += 1;
        sets.push(`\\set p${n} ${value}`);
        return `:p${n}`;
      }
      // The arrays of a batched write (src/db/batch.ts), each element as a value of its own.
      if (Array.isArray(value) && value.length > 0) return `ARRAY[${value.map(render).join(', ')}]`;
      return literal(value);
    };
    const body = text.replace(/\$(\d+)\b/g, (_, k: string) => render(values[Number(k) - 1]));
    // One statement per line block, ended by a semicolon (pgbench splits on it).
    return `${body.trim().replace(/\n\s*/g, '\n  ')};`;
  });
  if (options.randomId && draws === 0)
    throw new Error(
      `pgbench script: the drawn value ${options.randomId.value} is in none of the SQL (${options.title})`,
    );
  return [
    `-- ${options.title}`,
    '-- Generated by bench/run.ts from the SQL the service sent for one such request.',
    ...sets,
    ...statements,
    '',
  ].join('\n');
}

export function findPgbench(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'pgbench'))) return join(dir, 'pgbench');
  }
  for (const version of ['17', '16', '15', '14', '13']) {
    const candidate = `/usr/lib/postgresql/${version}/bin/pgbench`;
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

export interface PgbenchResult {
  tps: number;
  p50: number;
  p99: number;
  transactions: number;
  failed: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs the scripts for `seconds` with `clients` connections; latencies (ms) from pgbench's per-transaction log. */
export async function runPgbench(
  binary: string,
  url: string,
  scriptFiles: string[],
  clients: number,
  seconds: number,
): Promise<PgbenchResult> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-pgbench-'));
  try {
    // As the service's pool does (src/db/pool.ts): named prepared statements,
    // with its session settings (plan_cache_mode left at PostgreSQL's default).
    const args = ['-n', '-M', 'prepared', '-c', String(clients), '-j', '2', '-T', String(seconds)];
    // Several scripts: pgbench picks one at random for each transaction.
    for (const file of scriptFiles) args.push('-f', file);
    args.push('-l', `--log-prefix=${join(dir, 'tx')}`, url);
    const output = await new Promise<string>((resolvePromise, reject) => {
      const env = { ...process.env, PGOPTIONS: SESSION_OPTIONS };
      const child = spawn(binary, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
      child.once('error', reject);
      child.once('exit', (code) =>
        code === 0 ? resolvePromise(text) : reject(new Error(`pgbench exited with ${code}:\n${text.slice(-2000)}`)),
      );
    });
    const tps = Number(/tps = ([0-9.]+)/.exec(output)?.[1] ?? NaN);
    const transactions = Number(/number of transactions actually processed: (\d+)/.exec(output)?.[1] ?? 0);
    const failed = Number(/number of failed transactions: (\d+)/.exec(output)?.[1] ?? 0);
    const latencies: number[] = [];
    for (const file of await readdir(dir)) {
      for (const line of (await readFile(join(dir, file), 'utf8')).split('\n')) {
        const micros = Number(line.split(' ')[2]);
        if (line && Number.isFinite(micros)) latencies.push(micros / 1000);
      }
    }
    latencies.sort((a, b) => a - b);
    return { tps, transactions, failed, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function writeScript(dir: string, name: string, script: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = join(dir, `${name}.sql`);
  await writeFile(file, script);
  return file;
}
