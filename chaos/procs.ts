/**
 * The processes the chaos run owns, starts, kills and cleans up: private
 * PostgreSQL clusters (initdb under the temporary folder, as the `postgres`
 * user when run as root), redis-servers, PgBouncer, instances of the built
 * service, and fault proxies. Every one is registered for clean-up, which runs
 * on success, on failure and on Ctrl-C; nothing is stopped by name.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { productionArgs } from '../test/helpers/processes.js';

const run = promisify(execFile);
export const ROOT = resolve(import.meta.dirname, '..');
export const OUT = join(ROOT, 'chaos', 'out');
const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';
const IS_ROOT = process.getuid?.() === 0;
const PG_UID = IS_ROOT
  ? Number(readFileSync('/etc/passwd', 'utf8').match(/^postgres:[^:]*:(\d+):/m)?.[1] ?? NaN)
  : undefined;

const began = Date.now();
/** Progress on the console, with seconds since the run started. */
export const log = (msg: string): void =>
  console.log(`[chaos ${((Date.now() - began) / 1000).toFixed(0).padStart(4)} s] ${msg}`);

const cleanups: { name: string; fn: () => Promise<void> | void }[] = [];
/** Registers a clean-up step; they run last registered first. */
export function onCleanup(name: string, fn: () => Promise<void> | void): void {
  cleanups.push({ name, fn });
}
/** A point to clean up back to (what a scenario started after it). */
export const cleanupMark = (): number => cleanups.length;
export async function cleanUpAll(mark = 0): Promise<void> {
  while (cleanups.length > mark) {
    const { name, fn } = cleanups.pop()!;
    try {
      await fn();
    } catch (error) {
      console.error(`[chaos] clean-up of ${name} failed: ${(error as Error).message}`);
    }
  }
}

let workDir: string | undefined;
/** The run's temporary folder, made on first use (enterable by the postgres user). */
export function tempRoot(): string {
  if (!workDir) {
    const dir = mkdtempSync(join(tmpdir(), 'posts-api-chaos-'));
    chmodSync(dir, 0o755);
    workDir = dir;
    onCleanup('temporary folder', () => rmSync(dir, { recursive: true, force: true }));
  }
  return workDir;
}

export function freePort(): Promise<number> {
  return new Promise((done, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? done(address.port) : reject(new Error('no port'))));
    });
  });
}

export async function waitFor(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 30_000,
  everyMs = 50,
): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (
      await Promise.resolve()
        .then(check)
        .catch(() => false)
    )
      return Date.now() - start;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(everyMs);
  }
}

export function accepts(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect(port, host);
    socket.once('connect', () => (socket.destroy(), done(true)));
    socket.once('error', () => done(false));
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Runs a command as the postgres user (PostgreSQL refuses root). */
async function asPostgres(command: string, args: string[]): Promise<string> {
  const [cmd, argv] = IS_ROOT ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  const { stdout } = await run(cmd, argv, { maxBuffer: 1 << 24 });
  return stdout;
}

function giveToPostgres(path: string): void {
  if (PG_UID !== undefined && !Number.isNaN(PG_UID)) chownSync(path, PG_UID, PG_UID);
}

export interface ClusterOptions {
  maxConnections?: number;
  /** Extra postgresql.conf lines. */
  conf?: string[];
  /** A folder for pg_wal (a small file system for the disk-full fault). */
  walDir?: string;
  walSegmentMb?: number;
}

export class Cluster {
  constructor(
    readonly name: string,
    readonly dir: string,
    readonly port: number,
  ) {}

  get dataDir(): string {
    return join(this.dir, 'data');
  }
  get log(): string {
    return join(this.dir, 'postgres.log');
  }
  url(database = 'postgres', user = 'postgres'): string {
    return `postgres://${user}@127.0.0.1:${this.port}/${database}`;
  }

  static async create(name: string, options: ClusterOptions = {}): Promise<Cluster> {
    const dir = join(tempRoot(), name);
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o755);
    giveToPostgres(dir);
    const cluster = new Cluster(name, dir, await freePort());
    if (template && !options.walDir) {
      // A copy of the run's template: initdb and the migrations once per run, not once per scenario.
      await run('cp', ['-a', template, cluster.dataDir]);
    } else {
      const args = ['-D', cluster.dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8'];
      if (options.walDir) args.push(`--waldir=${options.walDir}`);
      if (options.walSegmentMb) args.push(`--wal-segsize=${options.walSegmentMb}`);
      await asPostgres(join(PG_BIN, 'initdb'), args);
    }
    const conf = [
      `listen_addresses = '127.0.0.1'`,
      `port = ${cluster.port}`,
      `unix_socket_directories = '${dir}'`,
      `cluster_name = 'chaos-${name}'`,
      `max_connections = ${options.maxConnections ?? 100}`,
      // Durability as production runs it: the claims are about acknowledged commits.
      `fsync = on`,
      `synchronous_commit = on`,
      `wal_level = replica`,
      `max_wal_senders = 10`,
      `log_line_prefix = '%m [%p] '`,
      ...(options.conf ?? []),
    ];
    writeFileSync(
      join(cluster.dataDir, 'postgresql.conf'),
      `${readFileSync(join(cluster.dataDir, 'postgresql.conf'), 'utf8')}\n${conf.join('\n')}\n`,
    );
    onCleanup(`PostgreSQL ${name}`, () => cluster.destroy());
    await cluster.start();
    return cluster;
  }

  /** Starts it; after a SIGKILL the old backends may still hold shared memory for a moment: retried. */
  async start(timeoutMs = 60_000): Promise<number> {
    const began = Date.now();
    for (;;) {
      try {
        await asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', this.dataDir, '-l', this.log, '-w', '-t', '60', 'start']);
        break;
      } catch (error) {
        if (Date.now() - began > timeoutMs)
          throw new Error(`PostgreSQL ${this.name} did not start; see ${this.log}`, { cause: error });
        await sleep(200);
      }
    }
    await waitFor(`PostgreSQL ${this.name} accepts queries`, () => this.ready(), timeoutMs);
    return Date.now() - began;
  }

  async ready(): Promise<boolean> {
    try {
      await run(join(PG_BIN, 'pg_isready'), ['-q', '-h', '127.0.0.1', '-p', String(this.port)]);
      return true;
    } catch {
      return false;
    }
  }

  postmasterPid(): number | undefined {
    const file = join(this.dataDir, 'postmaster.pid');
    if (!existsSync(file)) return undefined;
    const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
    return pid > 0 && alive(pid) ? pid : undefined;
  }

  /** kill -9 of the postmaster alone, as an OOM killer or an operator would; its backends notice and exit. */
  async kill9(): Promise<void> {
    const pid = this.postmasterPid();
    if (pid === undefined) throw new Error(`PostgreSQL ${this.name} is not running`);
    process.kill(pid, 'SIGKILL');
    await waitFor(`postmaster ${pid} is gone`, () => !alive(pid), 10_000);
  }

  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    if (this.postmasterPid() === undefined) return;
    await asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', this.dataDir, '-m', mode, '-w', 'stop']).catch(() => undefined);
  }

  async promote(): Promise<void> {
    await asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', this.dataDir, '-w', 'promote']);
  }

  async destroy(): Promise<void> {
    await this.stop('immediate');
    // A postmaster killed with SIGKILL leaves backends behind for a moment.
    await sleep(100);
  }

  async psql(sql: string, database = 'postgres'): Promise<string> {
    const { stdout } = await run(join(PG_BIN, 'psql'), [
      '-X',
      '-q',
      '-At',
      '-v',
      'ON_ERROR_STOP=1',
      '-h',
      '127.0.0.1',
      '-p',
      String(this.port),
      '-U',
      'postgres',
      '-d',
      database,
      '-c',
      sql,
    ]);
    return stdout.trim();
  }

  /** A base backup of this cluster as a streaming replica (`pg_basebackup -R`), started. */
  async replica(name: string, extraConf: string[] = []): Promise<Cluster> {
    const dir = join(tempRoot(), name);
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o755);
    giveToPostgres(dir);
    const replica = new Cluster(name, dir, await freePort());
    await asPostgres(join(PG_BIN, 'pg_basebackup'), [
      '-h',
      '127.0.0.1',
      '-p',
      String(this.port),
      '-U',
      'postgres',
      '-D',
      replica.dataDir,
      '-R',
      '-X',
      'stream',
      '-c',
      'fast',
    ]);
    const conf = [
      `port = ${replica.port}`,
      `unix_socket_directories = '${dir}'`,
      `cluster_name = '${name}'`,
      'hot_standby = on',
      ...extraConf,
    ];
    writeFileSync(
      join(replica.dataDir, 'postgresql.conf'),
      `${readFileSync(join(replica.dataDir, 'postgresql.conf'), 'utf8')}\n${conf.join('\n')}\n`,
    );
    onCleanup(`PostgreSQL ${name}`, () => replica.destroy());
    await replica.start();
    return replica;
  }
}

let template: string | undefined;

/** A stopped cluster with the migrated database `chaos` in it, which Cluster.create copies. */
export async function prepareTemplate(): Promise<void> {
  const cluster = await Cluster.create('template');
  await makeAppDatabase(cluster, 'chaos');
  await cluster.stop();
  template = cluster.dataDir;
}

/** A database owned by a login role without superuser rights, as production has it, migrated by the built CLI. */
export async function makeAppDatabase(cluster: Cluster, database: string): Promise<string> {
  if ((await cluster.psql(`SELECT 1 FROM pg_database WHERE datname = '${database}'`)) === '1')
    return cluster.url(database, 'app');
  await cluster.psql(`DO $$ BEGIN CREATE ROLE hog LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  await cluster.psql(
    `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF; END $$`,
  );
  await cluster.psql(`CREATE DATABASE ${database} OWNER app`);
  const url = cluster.url(database, 'app');
  await run(process.execPath, [join(ROOT, 'dist', 'src', 'cli.js'), 'migrate'], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: url, LOG_LEVEL: 'warn' },
  });
  return url;
}

/** A tmpfs of `mb` MiB at a new folder, unmounted at clean-up. */
export async function smallFileSystem(
  name: string,
  mb: number,
): Promise<{ path: string; grow(mb: number): Promise<void> }> {
  const path = join(tempRoot(), name);
  mkdirSync(path, { recursive: true });
  await run('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0755`, 'tmpfs', path]);
  giveToPostgres(path);
  onCleanup(`tmpfs ${name}`, async () => {
    await run('umount', ['-l', path]).catch(() => undefined);
  });
  return { path, grow: async (size) => void (await run('mount', ['-o', `remount,size=${size}m`, path])) };
}

export class Redis {
  child?: ChildProcess;
  constructor(readonly port: number) {}
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
  static async start(): Promise<Redis> {
    const redis = new Redis(await freePort());
    onCleanup('redis-server', () => redis.kill());
    await redis.start();
    return redis;
  }
  async start(): Promise<void> {
    this.child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    await waitFor(`redis-server listens on ${this.port}`, () => accepts(this.port));
  }
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGKILL');
    await exited;
  }
}

/** PgBouncer in transaction mode in front of `target`, plus a session-mode entry `<db>_session` for LISTEN. */
export class Bouncer {
  child?: ChildProcess;
  private constructor(
    readonly dir: string,
    readonly port: number,
    private target: number,
  ) {}
  url(database: string, user = 'app'): string {
    return `postgres://${user}@127.0.0.1:${this.port}/${database}`;
  }
  static async start(name: string, targetPort: number, databases: string[]): Promise<Bouncer> {
    const dir = join(tempRoot(), name);
    mkdirSync(dir, { recursive: true });
    giveToPostgres(dir);
    const bouncer = new Bouncer(dir, await freePort(), targetPort);
    bouncer.databases = databases;
    bouncer.writeIni();
    writeFileSync(join(dir, 'userlist.txt'), '"app" ""\n"postgres" ""\n');
    giveToPostgres(join(dir, 'userlist.txt'));
    const argv = [join(dir, 'pgbouncer.ini')];
    bouncer.child = IS_ROOT
      ? spawn('runuser', ['-u', 'postgres', '--', 'pgbouncer', ...argv], { stdio: 'ignore' })
      : spawn('pgbouncer', argv, { stdio: 'ignore' });
    onCleanup('pgbouncer', () => bouncer.stop());
    await waitFor(`pgbouncer listens on ${bouncer.port}`, () => accepts(bouncer.port));
    return bouncer;
  }
  private databases: string[] = [];
  private writeIni(): void {
    const entries = this.databases.flatMap((db) => [
      `${db} = host=127.0.0.1 port=${this.target} dbname=${db}`,
      `${db}_session = host=127.0.0.1 port=${this.target} dbname=${db} pool_mode=session`,
    ]);
    const ini = [
      '[databases]',
      ...entries,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${this.port}`,
      `unix_socket_dir = ${this.dir}`,
      'pool_mode = transaction',
      'ignore_startup_parameters = options, extra_float_digits',
      'auth_type = trust',
      `auth_file = ${join(this.dir, 'userlist.txt')}`,
      'max_client_conn = 2000',
      'default_pool_size = 40',
      // A dead server is tried again quickly (the default waits 15 s).
      'server_login_retry = 1',
      `logfile = ${join(this.dir, 'pgbouncer.log')}`,
      `pidfile = ${join(this.dir, 'pgbouncer.pid')}`,
    ].join('\n');
    writeFileSync(join(this.dir, 'pgbouncer.ini'), `${ini}\n`);
    giveToPostgres(join(this.dir, 'pgbouncer.ini'));
  }
  /** Points every database at another server and reloads (SIGHUP), as an operator's failover does. */
  async retarget(port: number): Promise<void> {
    this.target = port;
    this.writeIni();
    // The pgbouncer process itself (runuser, its parent when run as root, does not pass SIGHUP on).
    process.kill(Number(readFileSync(join(this.dir, 'pgbouncer.pid'), 'utf8')), 'SIGHUP');
    await sleep(200);
  }
  get log(): string {
    return join(this.dir, 'pgbouncer.log');
  }
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(5000)]);
  }
}

export interface ServiceOptions {
  databaseUrl: string;
  listenUrl?: string;
  readUrls?: string[];
  redisUrl?: string;
  env?: Record<string, string>;
}

/** The statement timeout every instance runs with here; the request bound derives from it. */
export const STATEMENT_TIMEOUT_MS = 2000;

/** `npm run start:prod`'s command (`node [flags] dist/src/server.js`), as the Docker image runs it. */
export class Service {
  child?: ChildProcess;
  private exited = true;
  constructor(
    readonly name: string,
    readonly port: number,
    private options: ServiceOptions,
  ) {}
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  get pid(): number | undefined {
    return this.exited ? undefined : this.child?.pid;
  }
  get logFile(): string {
    return join(OUT, `${this.name}.log`);
  }

  static async start(name: string, options: ServiceOptions): Promise<Service> {
    const service = new Service(name, await freePort(), options);
    onCleanup(`service ${name}`, () => service.stop());
    await service.start();
    return service;
  }

  async start(): Promise<void> {
    mkdirSync(OUT, { recursive: true });
    const fd = openSync(this.logFile, 'a');
    const o = this.options;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(this.port),
      DATABASE_URL: o.databaseUrl,
      LOG_LEVEL: 'info',
      RATE_LIMIT_MAX: '1000000',
      RATE_LIMIT_AUTH_MAX: '1000000',
      PG_POOL_MAX: '10',
      PG_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
      ...(o.listenUrl && { DATABASE_LISTEN_URL: o.listenUrl }),
      ...(o.readUrls?.length && { DATABASE_READ_URL: o.readUrls.join(',') }),
      ...(o.redisUrl && { REDIS_URL: o.redisUrl }),
      ...o.env,
    };
    const child = spawn(process.execPath, productionArgs(ROOT), {
      cwd: ROOT,
      env,
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    this.child = child;
    this.exited = false;
    child.once('exit', () => (this.exited = true));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (this.exited) throw new Error(`service ${this.name} exited during start-up; see ${this.logFile}`);
      const res = await fetch(`${this.url}/health/ready`).catch(() => undefined);
      if (res?.status === 200) return;
      if (Date.now() > deadline) throw new Error(`service ${this.name} not ready in 60 s; see ${this.logFile}`);
      await sleep(100);
    }
  }

  /** Resident memory in kB, from /proc. */
  rssKb(): number {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    return Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
  }
  /** Open files, not counting the HTTP connections of clients (their number follows the load, not a leak). */
  openFds(): number {
    const port = this.port.toString(16).toUpperCase().padStart(4, '0');
    const http = new Set<string>();
    for (const table of ['tcp', 'tcp6']) {
      for (const line of readFileSync(`/proc/${this.pid}/net/${table}`, 'utf8').split('\n').slice(1)) {
        const fields = line.trim().split(/\s+/);
        if (fields[1]?.endsWith(`:${port}`)) http.add(fields[9]!);
      }
    }
    return readdirSync(`/proc/${this.pid}/fd`).filter((fd) => {
      try {
        return !http.has(readlinkSync(`/proc/${this.pid}/fd/${fd}`).match(/^socket:\[(\d+)\]$/)?.[1] ?? '');
      } catch {
        return false;
      }
    }).length;
  }

  async kill9(): Promise<void> {
    const child = this.child;
    if (!child || this.exited) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || this.exited) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    if (!(await Promise.race([exited.then(() => true), sleep(15_000).then(() => false)]))) child.kill('SIGKILL');
  }
}

/** What a fault proxy does to the bytes it forwards. */
export interface Impairment {
  /** One-way delay added to each chunk, in each direction (ms). */
  delayMs: number;
  /** Share of chunks held back as TCP holds a lost segment: one retransmission timeout (200 ms) plus a round trip. */
  loss: number;
  /** Forward nothing, close nothing: a partition (a black hole). */
  blackhole: boolean;
}

const NONE: Impairment = { delayMs: 0, loss: 0, blackhole: false };

/**
 * A TCP proxy on 127.0.0.1 that delays, "loses" or black-holes what passes
 * through it, per direction, keeping byte order (as TCP does: a lost segment
 * holds back everything behind it until it is retransmitted). Used where the
 * kernel has no netem (probed at the start of the run).
 */
export class FaultProxy {
  private server?: Server;
  private sockets = new Set<Socket>();
  impairment: Impairment = { ...NONE };
  private constructor(
    readonly port: number,
    private target: number,
  ) {}

  static async start(target: number): Promise<FaultProxy> {
    const proxy = new FaultProxy(await freePort(), target);
    proxy.server = createServer((client) => proxy.accept(client));
    await new Promise<void>((done) => proxy.server!.listen(proxy.port, '127.0.0.1', done));
    onCleanup('fault proxy', () => proxy.close());
    return proxy;
  }

  set(impairment: Partial<Impairment>): void {
    this.impairment = { ...NONE, ...impairment };
    // Held data flows again once the partition heals.
    if (!this.impairment.blackhole) for (const flush of this.flushers) flush();
  }

  private flushers = new Set<() => void>();

  private accept(client: Socket): void {
    const server = connect(this.target, '127.0.0.1');
    this.sockets.add(client).add(server);
    const pipe = (from: Socket, to: Socket) => {
      // Chunks leave in order, each no earlier than its own due time.
      const queue: { due: number; data: Buffer }[] = [];
      let timer: NodeJS.Timeout | undefined;
      const pump = () => {
        timer = undefined;
        if (this.impairment.blackhole) return;
        const now = Date.now();
        while (queue.length && queue[0]!.due <= now) to.write(queue.shift()!.data);
        if (queue.length) timer = setTimeout(pump, queue[0]!.due - now);
      };
      this.flushers.add(() => timer ?? pump());
      from.on('data', (data: Buffer) => {
        const { delayMs, loss } = this.impairment;
        const lost = Math.random() < loss ? 200 + 2 * delayMs : 0;
        const due = Math.max(Date.now() + delayMs + lost, queue.at(-1)?.due ?? 0);
        queue.push({ due, data });
        if (!timer) pump();
      });
    };
    pipe(client, server);
    pipe(server, client);
    const end = () => {
      client.destroy();
      server.destroy();
      this.sockets.delete(client);
      this.sockets.delete(server);
    };
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((done) => this.server?.close(done) ?? done(undefined));
  }
}

/** Whether this kernel has netem (tried in a network namespace of our own, never on the machine's interfaces). */
export async function netemAvailable(): Promise<boolean> {
  if (!IS_ROOT) return false;
  const ns = `posts-api-chaos-probe-${process.pid}`;
  try {
    await run('ip', ['netns', 'add', ns]);
    await run('ip', ['netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev', 'lo', 'root', 'netem', 'delay', '1ms']);
    return true;
  } catch {
    return false;
  } finally {
    await run('ip', ['netns', 'del', ns]).catch(() => undefined);
  }
}

/** A direct pg pool for the checker and the fault clients (never the service's code). */
export function sqlPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  onCleanup('checker pool', () => pool.end().catch(() => undefined));
  return pool;
}
