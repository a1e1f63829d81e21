/**
 * The schema against the migrations this version ships (src/db/migrate.ts,
 * checked at start in src/plugins/db.ts and by readiness): behind stops
 * start-up with exit code 78 naming `npm run migrate` and makes readiness a
 * 503; ahead (a rolling upgrade) is served with one warning; a database that
 * is not there at start is said once, the process stays up answering 503, and
 * it serves by itself once the database appears. `npm run migrate` on a database ahead refuses, changing nothing.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import { migrate, NOT_MIGRATIONS, shippedMigrations } from '../../src/db/migrate.js';
import { checkDatabaseAtStart } from '../../src/plugins/db.js';
import { createTestDatabase, onTopology, testDatabaseName, testDatabaseUrl } from '../helpers/database.js';
import { expectError } from '../helpers/expect.js';
import { freePort, runToEnd, spawnServer, waitUntil } from '../helpers/processes.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups({ ignoreFailures: true });

/** The server itself, also in the scale topology: migrations are recorded on the primary. */
const direct = (url: string) => onTopology(url).databaseListenUrl ?? url;

async function sql(url: string, text: string, values: unknown[] = []): Promise<void> {
  const client = new pg.Client({ connectionString: direct(url) });
  await client.connect();
  await client.query(text, values).finally(() => client.end());
}

async function rows(url: string, text: string): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: direct(url) });
  await client.connect();
  return (await client.query(text).finally(() => client.end())).rows;
}

async function app(url: string): Promise<FastifyInstance> {
  return (await cleanups.app(onTopology(url))).app;
}

const behind = (n: number) =>
  `the database schema is behind this version of the service (${n} migration${n === 1 ? '' : 's'} not applied): run \`npm run migrate\``;

describe('readiness', () => {
  it('a database never migrated: 503 saying the schema is behind and to run npm run migrate', async () => {
    const db = await cleanups.database({ empty: true });
    const res = await (await app(db.url)).inject({ url: '/health/ready' });
    expectError(res, 503, 'service_unavailable', behind(shippedMigrations().length));
    expect(res.headers['retry-after']).toBe('30');
  });

  it('one migration not applied: 503; applied again: 200', async () => {
    const db = await cleanups.database();
    const last = shippedMigrations().at(-1)!;
    const api = await app(db.url);
    await sql(db.url, 'DELETE FROM pgmigrations WHERE name = $1', [last]);
    expectError(await api.inject({ url: '/health/ready' }), 503, 'service_unavailable', behind(1));
    await sql(db.url, 'INSERT INTO pgmigrations (name, run_on) VALUES ($1, now())', [last]);
    expect((await api.inject({ url: '/health/ready' })).statusCode).toBe(200);
  });

  it('a migration this version does not know (a newer one ran it): ready', async () => {
    const db = await cleanups.database();
    await sql(db.url, "INSERT INTO pgmigrations (name, run_on) VALUES ('9999999999999_from_the_future', now())");
    const res = await (await app(db.url)).inject({ url: '/health/ready' });
    expect(res.statusCode).toBe(200);
  });
});

describe('the check at start', () => {
  it('behind: an error with exit code 78 that names the missing migrations and npm run migrate', async () => {
    const db = await cleanups.database();
    const last = shippedMigrations().at(-1)!;
    await sql(db.url, 'DELETE FROM pgmigrations WHERE name = $1', [last]);
    const refused = checkDatabaseAtStart(direct(db.url), () => undefined);
    await expect(refused).rejects.toMatchObject({ exitCode: 78 });
    await expect(refused).rejects.toThrow(`1 migration(s) not applied (${last}); run \`npm run migrate\``);
  });

  it('ahead: one warning, no refusal', async () => {
    const db = await cleanups.database();
    await sql(db.url, "INSERT INTO pgmigrations (name, run_on) VALUES ('9999999999999_from_the_future', now())");
    const warnings: string[] = [];
    await checkDatabaseAtStart(direct(db.url), (message) => warnings.push(message));
    expect(warnings).toEqual([
      'the database schema is ahead of this version (applied by a newer one: 9999999999999_from_the_future); serving, as during a rolling upgrade',
    ]);
  });

  it('up to date: says nothing', async () => {
    const db = await cleanups.database();
    const warnings: string[] = [];
    await checkDatabaseAtStart(direct(db.url), (message) => warnings.push(message));
    expect(warnings).toEqual([]);
  });
});

/** `npm start` (without the npm wrapper) with DATABASE_URL, on a free port. */
async function startServer(databaseUrl: string) {
  const port = await freePort();
  const env = {
    PATH: process.env.PATH,
    DATABASE_URL: databaseUrl,
    HOST: '127.0.0.1',
    PORT: String(port),
    LOG_LEVEL: 'info',
    RATE_LIMIT_MAX: '1000000',
  };
  const { child, output, exited } = spawnServer(['--import', 'tsx', 'src/server.ts'], { env });
  cleanups.defer(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  const get = async (path: string) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    return {
      status: res.status,
      retryAfter: res.headers.get('retry-after'),
      body: (await res.json()) as { error?: string; message?: string },
    };
  };
  return { exited, output, get };
}

describe('npm start with DATABASE_URL', () => {
  it('on a database never migrated: refuses to start, exit code 78, naming npm run migrate', async () => {
    const db = await cleanups.database({ empty: true });
    const server = await startServer(direct(db.url));
    expect(await server.exited).toBe(78);
    expect(server.output()).toContain('the database schema is behind this version');
    expect(server.output()).toContain('run `npm run migrate`');
  }, 60_000);

  it('on a database that does not exist yet: stays up, says why once, answers 503, serves once it exists', async () => {
    const name = testDatabaseName();
    const server = await startServer(direct(testDatabaseUrl(name)));
    await waitUntil(
      'the server listens',
      async () => (await server.get('/health/live').catch(() => undefined))?.status === 200,
      400,
    );
    const missing = 'the database is missing (it does not exist on the server); try again later';
    const ready = await server.get('/health/ready');
    expect(ready).toMatchObject({
      status: 503,
      retryAfter: '30',
      body: { error: 'service_unavailable', message: missing },
    });
    expect(await server.get('/posts')).toMatchObject({
      status: 503,
      body: { error: 'service_unavailable', message: missing },
    });
    // Said once at start, plainly: the cause, no stack.
    const startLines = server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('the database is missing'));
    expect(startLines).toHaveLength(1);
    expect(startLines[0]).toContain('3D000');
    expect(server.output()).not.toMatch(/\n\s+at /);

    const db = await createTestDatabase(name);
    cleanups.defer(() => db.drop());
    await waitUntil('it serves', async () => (await server.get('/health/ready')).status === 200);
    expect((await server.get('/posts')).status).toBe(200);
  }, 60_000);
});

describe('npm run migrate on a database ahead of this version', () => {
  const ROOT = fileURLToPath(new URL('../..', import.meta.url));
  const future = '9999999999999_from_the_future';
  const refusal = (pending: string) =>
    `the database has applied migrations that this version does not ship (${pending}): a newer version or another ` +
    'build migrated it. Nothing was changed. Migrate it with that version or a newer one, or restore the backup ' +
    'taken before the upgrade. This version can still serve on it, started with DATABASE_URL';
  const applied = (url: string) => rows(url, 'SELECT name FROM pgmigrations ORDER BY id');
  const tables = (url: string) =>
    rows(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename");

  it('refuses, naming what it does not ship, and applies nothing, not even a migration of its own that is pending', async () => {
    const db = await cleanups.database();
    // The last shipped migration rolled back: one that a migrate would apply.
    await runner({
      databaseUrl: direct(db.url),
      dir: fileURLToPath(new URL('../../migrations', import.meta.url)),
      ignorePattern: NOT_MIGRATIONS,
      direction: 'down',
      count: 1,
      migrationsTable: 'pgmigrations',
      singleTransaction: true,
      log: () => {},
    });
    await sql(db.url, `INSERT INTO pgmigrations (name, run_on) VALUES ('${future}', now())`);
    const before = { applied: await applied(db.url), tables: await tables(db.url) };
    expect(before.applied).toContainEqual({ name: future });
    expect(before.applied).not.toContainEqual({ name: shippedMigrations().at(-1) });

    await expect(migrate(direct(db.url))).rejects.toThrow(refusal(future));
    expect({ applied: await applied(db.url), tables: await tables(db.url) }).toEqual(before);
  });

  it('as a command: the message on stderr, exit code 1', async () => {
    const db = await cleanups.database();
    await sql(db.url, `INSERT INTO pgmigrations (name, run_on) VALUES ('${future}', now())`);
    const result = await runToEnd('npm', ['run', '-s', 'migrate'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: direct(db.url) },
    });
    expect(result).toMatchObject({ code: 1, stdout: '', stderr: `${refusal(future)}\n` });
  }, 60_000);
});
