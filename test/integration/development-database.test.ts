/**
 * The embedded development database through the commands a developer types,
 * as real processes with a data folder and ports of their own:
 * - `npm run seed` without DATABASE_URL starts it, migrates, seeds, stops it;
 * - while `npm start` runs, `npm run admin:grant` uses its database;
 * - SIGTERM to `npm start`, or Ctrl-C (SIGINT to its whole process group),
 *   leaves no server, no PostgreSQL of that folder, and frees both ports;
 * - run as root, a parent folder the postgres user cannot enter is named.
 */
import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accepts, alive, freePort, runToEnd, signalIfStill, waitUntil } from '../helpers/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let dir: string;
let env: Record<string, string | undefined>;
let pgPort: number;
let httpPort: number;
let seededEmail: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'posts-api-devdb-'));
  // mkdtemp makes it 0700; run as root, the server runs as the postgres user, which must enter it.
  await chmod(dir, 0o755);
  [pgPort, httpPort] = [await freePort(), await freePort()];
  // DATABASE_URL set but empty wins over any .env of the project: the embedded database it is.
  env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATABASE_URL: '',
    EMBEDDED_PG_DATA: join(dir, 'pg'),
    EMBEDDED_PG_PORT: String(pgPort),
    PORT: String(httpPort),
    HOST: '127.0.0.1',
    REDIS_URL: '',
    LOG_LEVEL: 'info',
  };
});
/**
 * What a failed test may leave running: servers, then their PostgreSQL (immediate shutdown). Each is
 * signalled only while it still belongs to this file's folder: by then its PID may name another process.
 */
const leftovers: { pid: number; signal: NodeJS.Signals }[] = [];
afterAll(async () => {
  for (const { pid, signal } of leftovers) await signalIfStill(pid, signal, dir);
  await rm(dir, { recursive: true, force: true });
});

const npmRun = (script: string, args: string[]) =>
  runToEnd('npm', ['run', '-s', script, '--', ...args], { cwd: ROOT, env });

/** PID of the PostgreSQL running on the data folder, if any. */
async function postmasterPid(): Promise<number | undefined> {
  const text = await readFile(join(dir, 'pg', 'postmaster.pid'), 'utf8').catch(() => undefined);
  return text === undefined ? undefined : Number(text.split('\n')[0]);
}

it('npm run seed without DATABASE_URL starts the embedded database, migrates, seeds and stops it', async () => {
  const { code, stdout, stderr } = await npmRun('seed', ['--posts', '20']);
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  expect(stdout).toContain(
    `DATABASE_URL is unset: started the embedded PostgreSQL of ${join(dir, 'pg')} on port ${pgPort} (stopped when done)\n`,
  );
  expect(stdout).toContain('seeded 2 users, 20 posts, 40 comments in ');
  seededEmail = /log in with (\S+)\n/.exec(stdout)![1]!;
  expect(await postmasterPid()).toBeUndefined();
  expect(await accepts(pgPort)).toBe(false);
}, 120_000);

/** `npm start` on the embedded database; resolves once it serves, with the PIDs of the server and its PostgreSQL. */
async function npmStart(detached: boolean) {
  const npm = spawn('npm', ['start'], { cwd: ROOT, env, detached, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  npm.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  npm.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise((resolve) => npm.once('exit', resolve));
  await waitUntil('npm start serves', () => output.includes('"msg":"listening on ') || npm.exitCode !== null, 1200);
  const server = Number(/"pid":(\d+)/.exec(output)?.[1]);
  const postgres = await postmasterPid();
  for (const [pid, signal] of [
    [server, 'SIGKILL'],
    [postgres, 'SIGQUIT'],
  ] as const)
    if (Number.isInteger(pid) && pid! > 0) leftovers.push({ pid: pid!, signal });
  expect({ server: Number.isInteger(server), postgres: Number.isInteger(postgres) }, output).toEqual({
    server: true,
    postgres: true,
  });
  return { npm, exited, server, postgres: postgres!, output: () => output };
}

async function expectAllGone(pids: number[]) {
  await waitUntil('the server and its PostgreSQL are gone', () => pids.every((pid) => !alive(pid)));
  expect(await accepts(httpPort)).toBe(false);
  expect(await accepts(pgPort)).toBe(false);
  expect(await postmasterPid()).toBeUndefined();
}

describe('npm start', () => {
  it('shares its database with the commands; SIGTERM to npm stops the server and PostgreSQL, and frees the ports', async () => {
    const started = await npmStart(false);
    const grant = await npmRun('admin:grant', [seededEmail]);
    expect(grant).toMatchObject({ code: 0, stderr: '' });
    expect(grant.stdout).toContain(
      `DATABASE_URL is unset: using the running embedded PostgreSQL of ${join(dir, 'pg')}\n`,
    );
    expect(grant.stdout).toContain(`(${seededEmail}) is now an admin\n`);
    expect(alive(started.postgres)).toBe(true);

    started.npm.kill('SIGTERM');
    await started.exited;
    await expectAllGone([started.server, started.postgres]);
    expect(started.output()).toContain('"signal":"SIGTERM","msg":"shutting down"');
  }, 120_000);

  it('Ctrl-C (SIGINT to the whole process group) stops them too', async () => {
    const started = await npmStart(true);
    // A read first: the pool then holds idle connections.
    expect((await fetch(`http://127.0.0.1:${httpPort}/posts`)).status).toBe(200);
    process.kill(-started.npm.pid!, 'SIGINT');
    // npm forwards the SIGINT to the server, which got it from the group already: still one graceful close.
    expect(await started.exited).toBe(0);
    await expectAllGone([started.server, started.postgres]);
    expect(started.output()).toContain('"signal":"SIGINT","msg":"shutting down"');
    expect(started.output()).not.toContain('second SIGINT');
    // PostgreSQL got the SIGINT too, and ended the pool's connections as the server closed it.
    expect(started.output()).not.toContain('an idle database connection failed');
  }, 120_000);
});

it.runIf(process.getuid?.() === 0)(
  'run as root, a folder the postgres user cannot enter is named, not "spawn initdb EACCES"',
  async () => {
    const closed = join(dir, 'closed');
    await mkdir(closed, { mode: 0o700 });
    const { code, stderr } = await runToEnd('npm', ['run', '-s', 'migrate'], {
      cwd: ROOT,
      env: { ...env, EMBEDDED_PG_DATA: join(closed, 'pg') },
    });
    expect({ code, stderr }).toEqual({
      code: 1,
      stderr:
        `embedded PostgreSQL runs as the "postgres" OS user (Node runs as root), which cannot enter ${closed} (mode 0700). ` +
        `Fix: \`chmod o+x ${closed}\`, move the project to a folder others can enter, ` +
        'or set DATABASE_URL (TEST_DATABASE_URL for tests) to use an existing PostgreSQL server.\n',
    });
  },
);
