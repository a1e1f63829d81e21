/**
 * The server and the operator commands as an operator meets them, as real
 * processes: --help and usage in the words typed (npm or not), exit 64 on
 * what they do not know, every configuration error at once (exit 78), .env
 * read from the working directory, the start-up line, HOST's default and a
 * port in use. Each process gets a bare environment, so nothing of this one
 * (DATABASE_URL, npm_* variables) leaks in.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { createRequire } from 'node:module';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, databaseEnv, type TestDatabase } from '../helpers/database.js';
import { accepts, freePort, runToEnd, spawnServer, waitUntil } from '../helpers/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const BARE_ENV = { PATH: process.env.PATH, HOME: process.env.HOME };

let db: TestDatabase;
/** A working directory without a .env. */
let cwd: string;
const servers = new Set<ChildProcess>();

beforeAll(async () => {
  db = await createTestDatabase();
  cwd = await mkdtemp(join(tmpdir(), 'posts-api-entry-'));
});
afterAll(async () => {
  // A server left running by a failed test.
  for (const child of servers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await rm(cwd, { recursive: true, force: true });
  await db?.drop();
});

/** `node --import tsx src/<entry>.ts args`, from `dir`. */
const node = (entry: 'server' | 'cli', args: string[], env: Record<string, string> = {}, dir = cwd) =>
  runToEnd(process.execPath, ['--import', TSX, join(ROOT, `src/${entry}.ts`), ...args], {
    cwd: dir,
    env: { ...BARE_ENV, ...env },
  });

/** A working directory of its own holding `.env`. */
async function withEnvFile(name: string, text: string): Promise<string> {
  const dir = join(cwd, name);
  await mkdir(dir);
  await writeFile(join(dir, '.env'), text);
  return dir;
}

/** `npm run -s <script> -- args` in the project. */
const npm = (script: string, args: string[]) =>
  runToEnd('npm', ['run', '-s', script, '--', ...args], { cwd: ROOT, env: BARE_ENV });

// Processes apart: these run side by side.
describe.concurrent('--help and usage', () => {
  it.each([
    ['seed', 'usage: npm run seed -- --posts N [--comments N] [--users N]\n', '  --users N '],
    ['start', 'usage: npm start -- [--help]\n', '  RATE_LIMIT_MAX (300): requests per window per client\n'],
    ['bench', 'usage: npm run bench -- [--smoke] ', '  --variant name=ref[:cache]\n'],
    ['chaos', 'usage: npm run chaos -- [--short] [--only ids] [--no-build]\n', '  --short '],
  ])(
    'npm run %s -- --help prints the usage as typed, exit 0',
    async (script, usage, text) => {
      const { code, stdout, stderr } = await npm(script, ['--help']);
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expect(stdout.startsWith(usage)).toBe(true);
      expect(stdout).toContain(text);
      // Generous: four processes through npm and tsx side by side on a loaded machine.
    },
    120_000,
  );

  it('--help without npm names the file run, exit 0', async () => {
    const { code, stdout } = await runToEnd(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'migrate', '--help'], {
      cwd: ROOT,
      env: BARE_ENV,
    });
    expect(code).toBe(0);
    expect(stdout.startsWith('usage: npx tsx src/cli.ts migrate\n\nApplies pending migrations')).toBe(true);
  });

  it.each([
    ['seed', 'usage: npm run seed -- --posts N [--comments N] [--users N]'],
    ['chaos', 'usage: npm run chaos -- [--short] [--only ids] [--no-build]'],
  ])('npm run %s with an unknown option prints the usage, exit 64', async (script, usage) => {
    expect(await npm(script, ['--bogus'])).toMatchObject({
      code: 64,
      stdout: '',
      stderr: `Unknown option '--bogus'\n${usage}\n(--help for more)\n`,
    });
  });

  it.each([
    ['server', ['--port', '3000'], "Unknown option '--port'", 'npx tsx src/server.ts [--help]'],
    [
      'cli',
      ['seed', '--posts', 'many'],
      "--posts must be a non-negative integer, not 'many'",
      'npx tsx src/cli.ts seed --posts N [--comments N] [--users N]',
    ],
    ['cli', ['admin:grant'], 'missing argument: <email>', 'npx tsx src/cli.ts admin:grant <email>'],
    ['cli', ['migrate', 'now'], "unexpected argument 'now'", 'npx tsx src/cli.ts migrate'],
  ] as const)('%s %j is a usage error, exit 64', async (entry, args, reason, usage) => {
    // Run from the project, as a user would type it without npm.
    const result = await runToEnd(process.execPath, ['--import', 'tsx', `src/${entry}.ts`, ...args], {
      cwd: ROOT,
      env: BARE_ENV,
    });
    expect(result).toMatchObject({ code: 64, stdout: '', stderr: `${reason}\nusage: ${usage}\n(--help for more)\n` });
  });

  it('an unknown command prints the command list, exit 64', async () => {
    expect(await node('cli', ['grant'])).toMatchObject({
      code: 64,
      stderr: expect.stringMatching(
        /^unknown command 'grant'\nusage: npx tsx .*cli\.ts <migrate\|admin:grant\|seed> \[--help\]\n$/,
      ),
    });
  });
});

describe.concurrent('configuration errors', () => {
  const bad = {
    LOG_LEVEL: 'loud',
    PORT: 'x',
    CORS_ORIGINS: 'foo',
    TRUST_PROXY: '/^(true|false)$/',
    DATABASE_URL: 'mysql://app:s3cret@db/x',
  };
  const report =
    'configuration error (environment variables and .env):\n' +
    '  DATABASE_URL="mysql://app:***@db/x": must be a postgres:// or postgresql:// URL\n' +
    '  PORT="x": must be an integer from 0 to 65535\n' +
    '  LOG_LEVEL="loud": must be one of fatal, error, warn, info, debug, trace, silent\n' +
    '  TRUST_PROXY="/^(true|false)$/": must be false, true, a hop count (e.g. 1), or comma-separated IP addresses or CIDRs of trusted proxies\n' +
    '  CORS_ORIGINS="foo": must be *, or comma-separated origins scheme://host[:port] without a path (e.g. https://app.example.com)\n';

  it('the server lists every invalid variable with what it must be, exit 78', async () => {
    expect(await node('server', [], bad)).toEqual({ code: 78, signal: null, stdout: '', stderr: report });
  });

  it('so do the commands, for the settings they use', async () => {
    expect(await node('cli', ['seed', '--posts', '1'], bad)).toEqual({
      code: 78,
      signal: null,
      stdout: '',
      stderr: report.split('\n').slice(0, 2).join('\n') + '\n',
    });
  });

  it('a command ignores the settings it does not use: migrate with PORT=abc migrates', async () => {
    const { DATABASE_URL: _, ...unused } = bad;
    const { code, stderr } = await node('cli', ['migrate'], { ...databaseEnv(db.url), ...unused, PORT: 'abc' });
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('a malformed .env names its line, exit 78', async () => {
    const dir = await withEnvFile('malformed', '# settings\nRATE_LIMIT_MAX 7\n');
    expect(await node('server', [], {}, dir)).toMatchObject({
      code: 78,
      stderr:
        'configuration error (environment variables and .env):\n  .env line 2: expected NAME=value, found "RATE_LIMIT_MAX 7"\n',
    });
  });
});

/** A server process from `dir`, resolved once it has logged its start-up line. */
async function startServer(env: Record<string, string>, dir = cwd) {
  const { child, output, exited } = spawnServer(['--import', TSX, join(ROOT, 'src/server.ts')], {
    cwd: dir,
    env: { ...BARE_ENV, ...env },
  });
  servers.add(child);
  await waitUntil(
    'the server has started',
    () => output().includes('"msg":"listening on ') || child.exitCode !== null,
    400,
  );
  const stop = async () => {
    child.kill('SIGTERM');
    return exited;
  };
  return {
    get output() {
      return output();
    },
    stop,
  };
}

function get(port: number, path: string): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => resolve(res.resume())).on('error', reject);
  });
}

describe('.env', () => {
  it('the server reads .env from the working directory: .env.example copied, RATE_LIMIT_MAX=7; the environment wins', async () => {
    const example = await readFile(join(ROOT, '.env.example'), 'utf8');
    expect(example).toMatch(/^RATE_LIMIT_MAX=300$/m);
    const dir = await withEnvFile('example', example.replace(/^RATE_LIMIT_MAX=300$/m, 'RATE_LIMIT_MAX=7'));
    const port = await freePort();
    // PORT from the environment, not .env's 3000.
    const server = await startServer({ ...databaseEnv(db.url), PORT: String(port) }, dir);
    try {
      const res = await get(port, '/posts');
      expect(res.statusCode).toBe(200);
      expect(res.headers['ratelimit-limit']).toBe('7');
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('so do the commands', async () => {
    const dir = await withEnvFile('commands', `DATABASE_URL=${db.url}\n`);
    expect(await node('cli', ['admin:grant', 'nobody@example.com'], {}, dir)).toMatchObject({
      code: 1,
      stderr: 'no user with e-mail nobody@example.com\n',
    });
  });
});

describe('start-up', () => {
  it('one line names the URL, the docs, the database, the rate-limit store, the shared-cache bound, the replicas and tracing, without a password; HOST is 127.0.0.1', async () => {
    const url = new URL(db.url);
    // Trust authentication ignores a password; one the server needs is kept.
    if (url.password === '') url.password = 'startup-secret-password';
    const port = await freePort();
    const env: Record<string, string> = {
      ...databaseEnv(url.toString()),
      PORT: String(port),
      SHARED_CACHE_SECONDS: '3',
    };
    const server = await startServer(env);
    try {
      const line = server.output.split('\n').find((l) => l.includes('"msg":"listening on '));
      const target = (u: string) => `${new URL(u).hostname}:${new URL(u).port || 5432}${new URL(u).pathname}`;
      const database = target(db.url);
      const replicas = env.DATABASE_READ_URL ? env.DATABASE_READ_URL.split(',').map(target).join(', ') : 'none';
      expect(JSON.parse(line!)).toMatchObject({
        level: 30,
        url: `http://127.0.0.1:${port}`,
        docs: `http://127.0.0.1:${port}/docs`,
        database,
        rateLimitStore: 'memory',
        sharedCache: 's-maxage=3',
        replicas,
        tracing: 'off',
        msg:
          `listening on http://127.0.0.1:${port} (docs: http://127.0.0.1:${port}/docs); database ${database}; ` +
          `rate limits in memory; shared cache s-maxage=3; read replicas ${replicas}; tracing off`,
      });
      expect(server.output).not.toContain(`:${url.password}@`);
      expect(server.output).not.toContain(url.username === '' ? url.password : `${url.username}:`);
      // Only loopback listens by default: another address of this machine is refused.
      const other = Object.values(networkInterfaces())
        .flat()
        .find((i) => i && i.family === 'IPv4' && !i.internal);
      if (other) expect(await accepts(port, other.address)).toBe(false);
      expect((await get(port, '/health/live')).statusCode).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('a port in use names PORT and HOST, exit 1, no stack, nothing else logged', async () => {
    const holder: Server = createServer();
    const port = await freePort();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
    try {
      const { code, stdout, stderr } = await node('server', [], {
        ...databaseEnv(db.url),
        PORT: String(port),
        LOG_LEVEL: 'warn',
      });
      // Not `numbering events failed` with a stack: the events session closed under a running call.
      expect({ code, stdout, stderr }).toEqual({
        code: 1,
        stdout: '',
        stderr: `cannot listen on HOST=127.0.0.1 PORT=${port}: the port is already in use; stop what uses it or set another PORT\n`,
      });
    } finally {
      holder.close();
    }
  });
});
