/**
 * The processes the bench runs (services, the edge, the baseline, the peer, builds) and
 * what it reads of them: CPU seconds from /proc/<pid>/stat, memory from
 * /proc/<pid>/status. Also the run's log line.
 */
import { spawn, execFileSync } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startEdgeCache } from '../test/helpers/edge-cache.js';
import { productionArgs } from '../test/helpers/processes.js';

export const ROOT = resolve(import.meta.dirname, '..');
export const OUT = join(ROOT, 'bench', 'out');

const started = performance.now();
export const log = (msg: string) =>
  console.log(`[bench ${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${msg}`);

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** Runs a command to its end (output to the bench's own), failing on a non-zero exit. */
export function run(
  command: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; quiet?: boolean } = {},
): Promise<void> {
  return new Promise((done, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd ?? ROOT,
      env: options.env ?? process.env,
      stdio: options.quiet ? 'ignore' : 'inherit',
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0
        ? done()
        : reject(new Error(`${command} ${args.join(' ')} exited with ${code} (in ${options.cwd ?? ROOT})`)),
    );
  });
}

export interface Child {
  name: string;
  pid: number;
  url: string;
  stop(): Promise<void>;
  /** The processes whose CPU is this one's (the edge: nginx's and the service's behind it); default its pid. */
  cpuPids?: () => number[];
}

export interface ChildOptions {
  /** Default: the Node running the bench. */
  command?: string;
  cwd?: string;
  /** GET answered 200 once it is ready. */
  readyPath: string;
  readySeconds?: number;
}

export async function startChild(
  name: string,
  args: string[],
  env: Record<string, string>,
  port: number,
  { command = process.execPath, cwd = ROOT, readyPath, readySeconds = 30 }: ChildOptions,
): Promise<Child> {
  await mkdir(OUT, { recursive: true });
  const errFd = openSync(join(OUT, `${name}.stderr.log`), 'w');
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'ignore', errFd] });
  closeSync(errFd);
  let exited = false;
  const exit = new Promise<void>((done) => child.once('exit', () => ((exited = true), done())));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readySeconds * 1000;
  for (;;) {
    if (exited) throw new Error(`${name} exited during start-up; see bench/out/${name}.stderr.log`);
    try {
      const res = await fetch(`${url}${readyPath}`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGTERM');
      throw new Error(`${name} did not become ready in ${readySeconds} s; see bench/out/${name}.stderr.log`);
    }
    await sleep(100);
  }
  return {
    name,
    pid: child.pid!,
    url,
    stop: async () => {
      if (!exited) child.kill('SIGTERM');
      await Promise.race([exit, sleep(15_000)]);
    },
  };
}

const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** CPU seconds a child has used so far: its processes' (cpuPids), else its own. */
export const childCpuSeconds = (c: Child) => (c.cpuPids?.() ?? [c.pid]).reduce((n, pid) => n + cpuSeconds(pid), 0);

/** CPU seconds used so far by each PostgreSQL server process on this machine. */
export function postgresCpu(): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/stat`, 'utf8').includes('(postgres)'))
        cpu.set(Number(entry), cpuSeconds(Number(entry)));
    } catch {
      // the process ended meanwhile
    }
  }
  return cpu;
}

/**
 * CPU seconds PostgreSQL used between two readings: per process, so a backend
 * that exited in between (a pgbench connection closing) takes its whole past
 * with it instead of making the difference negative.
 */
export function postgresCpuSince(before: Map<number, number>): number {
  let total = 0;
  for (const [pid, seconds] of postgresCpu()) total += seconds - (before.get(pid) ?? 0);
  return total;
}

/**
 * Restarts the peak-RSS count (VmHWM) of a process, so the peak measured is the
 * load's: the setup's log-ins each hash a password with scrypt (32 MiB apiece).
 */
export function resetPeakRss(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/** Kilobytes from /proc/<pid>/status (VmRSS now, VmHWM the peak). */
export function memoryKb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match?.[1] ?? 0);
}

/** The services' pool size (PG_POOL_MAX), also pgbench's clients. */
export const PG_POOL_MAX = 10;

export interface ServiceOptions {
  /** The checkout to run (a variant's worktree); default this one. */
  root?: string;
  /** Node flags before the script (profiles, investigations). */
  nodeArgs?: string[];
  /** More environment variables (MAX_STREAMS...), over the defaults. */
  env?: Record<string, string>;
}

/** `npm run start:prod` of checkout `root` on `databaseUrl`, with production defaults. */
export function startService(
  name: string,
  databaseUrl: string,
  port: number,
  { root = ROOT, nodeArgs = [], env = {} }: ServiceOptions = {},
): Promise<Child> {
  return startChild(
    name,
    [...nodeArgs, ...productionArgs(root)],
    {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
      DATABASE_URL: databaseUrl,
      HOST: '127.0.0.1',
      PORT: String(port),
      // The production default: one access-log line per request (to /dev/null here).
      LOG_LEVEL: 'info',
      // The limiter stays on (its cost is part of every request) but never throttles the load.
      RATE_LIMIT_MAX: '1000000',
      RATE_LIMIT_AUTH_MAX: '1000000',
      PG_POOL_MAX: String(PG_POOL_MAX),
      ...env,
    },
    port,
    { cwd: root, readyPath: '/health/ready' },
  );
}

/**
 * The deployed edge: Debian's nginx with deploy/edge-standalone.sh's configuration
 * (deploy/edge-cache.conf's rules) in front of `service`, one worker per core
 * (`worker_processes auto`). Its CPU is nginx's (master and workers) plus the
 * service's, so it compares with the service straight.
 */
export async function startEdge(service: Child): Promise<Child> {
  const edge = await startEdgeCache(new URL(service.url).host);
  const workers = () =>
    readFileSync(`/proc/${edge.pid}/task/${edge.pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  return {
    name: 'edge',
    pid: edge.pid,
    url: edge.url,
    stop: () => edge.stop(),
    cpuPids: () => [service.pid, edge.pid, ...workers()],
  };
}
