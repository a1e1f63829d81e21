/**
 * Vitest global setup: finds a throwaway PostgreSQL server once per run,
 * migrates a template database on it and hands both names to the test
 * files, which clone the template (see database.ts) instead of migrating
 * again. Sources, first that works: TEST_DATABASE_URL, a Docker container
 * via testcontainers, an embedded server in a temp folder.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '../../src/dev/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { POSTGRES_TROUBLE, troubleSummary } from './processes.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A database on the test server to connect to for CREATE/DROP DATABASE. */
    databaseAdminUrl: string;
    /** The migrated database every test database is cloned from. */
    databaseTemplate: string;
    /** Name prefix of the test databases of this run, so teardown finds leftovers. */
    databaseTestPrefix: string;
  }
}

interface Server {
  source: string;
  adminUrl: string;
  /** Only for servers we started: they hold nothing worth keeping. */
  throwaway: boolean;
  stop(): Promise<void>;
}

// Long enough for a busy machine (starting node and loading testcontainers alone took over 5 s on
// 2 cores at load 40), short enough that a DOCKER_HOST that never answers does not stall every run.
const DOCKER_PROBE_TIMEOUT_MS = 20_000;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = performance.now();
  const server = await obtainServer();
  const runId = randomBytes(4).toString('hex');
  const template = `posts_api_tpl_${runId}`;
  const testPrefix = `posts_api_test_${runId}_`;

  const teardown = async (): Promise<void> => {
    try {
      await dropDatabases(server.adminUrl, template, testPrefix);
    } finally {
      await server.stop();
    }
  };

  try {
    if (server.throwaway) await relaxDurability(server.adminUrl);
    await withClient(server.adminUrl, (c) => c.query(`CREATE DATABASE ${c.escapeIdentifier(template)}`));
    // Migrations hold a session-level advisory lock: directly on the server, never through a pooler.
    await migrate(withDatabase(process.env.TEST_DATABASE_LISTEN_URL || server.adminUrl, template));
    // No one may connect to the template: CREATE DATABASE ... TEMPLATE fails
    // while any session is connected to it.
    await withClient(server.adminUrl, (c) =>
      c.query(`ALTER DATABASE ${c.escapeIdentifier(template)} WITH ALLOW_CONNECTIONS false`),
    );
  } catch (error) {
    await teardown().catch(() => {});
    throw error;
  }

  project.provide('databaseAdminUrl', server.adminUrl);
  project.provide('databaseTemplate', template);
  project.provide('databaseTestPrefix', testPrefix);
  console.log(`[test db] ${server.source}, ready in ${Math.round(performance.now() - started)} ms`);
  return teardown;
}

async function obtainServer(): Promise<Server> {
  const external = process.env.TEST_DATABASE_URL;
  if (external !== undefined && external !== '') {
    return {
      source: `TEST_DATABASE_URL (${redact(external)})`,
      adminUrl: external,
      throwaway: false,
      stop: async () => {},
    };
  }
  const container = await tryContainer();
  if (container !== undefined) return container;
  return startEmbedded();
}

// The stack's own PostgreSQL (docker-compose.yml); where no registry answers, `npm run stack:images` builds it.
const POSTGRES_IMAGE = 'postgres:17.11-trixie';
// Ryuk removes the containers of a run that was killed; it too comes from a registry.
const REAPER_IMAGE = process.env.RYUK_CONTAINER_IMAGE ?? 'testcontainers/ryuk:0.14.0';

async function tryContainer(): Promise<Server | undefined> {
  if (!(await dockerAnswers())) return undefined;
  try {
    const { getContainerRuntimeClient, ImageName } = await import('testcontainers');
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const client = await getContainerRuntimeClient();
    if (
      process.env.TESTCONTAINERS_RYUK_DISABLED === undefined &&
      !(await client.image.exists(ImageName.fromString(REAPER_IMAGE)))
    ) {
      // Without its image, go without it: teardown stops the container, a killed run leaves it.
      process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
    }
    const container = await new PostgreSqlContainer(POSTGRES_IMAGE).start();
    const trouble = await watchForTrouble(container);
    return {
      source: `Docker container ${POSTGRES_IMAGE} (${container.getHost()}:${container.getPort()})`,
      adminUrl: container.getConnectionUri(),
      throwaway: true,
      stop: async () => {
        const seen = trouble();
        if (seen.length > 0) console.warn(`[test db] the container's PostgreSQL logged:\n  ${seen.join('\n  ')}`);
        await container.stop();
      },
    };
  } catch (error) {
    // E.g. no registry and no stand-in image: the embedded server still works.
    const why = ((error as Error).message.split('\n')[0] ?? '').trim().slice(0, 300);
    console.warn(`[test db] Docker answers but ${POSTGRES_IMAGE} did not start (${why}); using an embedded PostgreSQL`);
    return undefined;
  }
}

/**
 * A server-wide event under the tests (a backend that crashed, a restart, recovery) fails whichever test was using
 * the database then, with a 503 that does not say why; the container's log goes with it. Its lines of trouble are
 * kept here and summed up at the end of the run. One CI run through testcontainers saw a sign-up answered
 * "the database is shutting down or starting up" mid-suite, and nothing else to go by.
 */
async function watchForTrouble(container: { logs(): Promise<NodeJS.ReadableStream> }): Promise<() => string[]> {
  const trouble: string[] = [];
  const stream = await container.logs();
  stream.on('data', (chunk: Buffer | string) => {
    for (const line of String(chunk).split('\n')) if (POSTGRES_TROUBLE.test(line)) trouble.push(line);
  });
  stream.on('error', () => undefined);
  return () => troubleSummary(trouble, POSTGRES_TROUBLE, 20);
}

/**
 * Asks testcontainers (which knows DOCKER_HOST, ~/.testcontainers.properties,
 * rootless and Desktop sockets) whether an engine answers, in a child
 * process: an unanswered request cannot be cancelled and would otherwise keep
 * this process alive long after the tests.
 */
function dockerAnswers(): Promise<boolean> {
  const entry = createRequire(import.meta.url).resolve('testcontainers');
  const script = `require(${JSON.stringify(entry)}).getContainerRuntimeClient().then(() => process.exit(0), () => process.exit(1))`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore', timeout: DOCKER_PROBE_TIMEOUT_MS });
    child.once('error', () => resolve(false));
    child.once('exit', (code, signal) => {
      if (signal) console.warn(`[test db] Docker did not answer within ${DOCKER_PROBE_TIMEOUT_MS} ms; not using it`);
      resolve(code === 0);
    });
  });
}

async function startEmbedded(): Promise<Server> {
  const dir = await mkdtemp(join(tmpdir(), 'posts-api-test-pg-'));
  // mkdtemp makes it 0700; when we run as root the server runs as the
  // postgres user, which must be able to enter it.
  await chmod(dir, 0o755);
  try {
    const pg = await startEmbeddedPostgres({
      dataDir: join(dir, 'data'),
      port: await freePort(),
      database: 'postgres',
    });
    return {
      source: `embedded PostgreSQL on 127.0.0.1:${new URL(pg.url).port}`,
      adminUrl: pg.url,
      throwaway: true,
      stop: async () => {
        try {
          await pg.stop();
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * Test data is disposable, so skip flushing to disk: much faster database
 * creation and commits. All three settings apply on reload.
 */
async function relaxDurability(adminUrl: string): Promise<void> {
  await withClient(adminUrl, async (c) => {
    for (const setting of ['fsync', 'synchronous_commit', 'full_page_writes']) {
      await c.query(`ALTER SYSTEM SET ${setting} = off`);
    }
    await c.query('SELECT pg_reload_conf()');
  });
}

async function dropDatabases(adminUrl: string, template: string, testPrefix: string): Promise<void> {
  await withClient(adminUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(
      'SELECT datname FROM pg_database WHERE datname = $1 OR starts_with(datname, $2)',
      [template, testPrefix],
    );
    for (const { datname } of rows) {
      await c.query(`DROP DATABASE IF EXISTS ${c.escapeIdentifier(datname)} WITH (FORCE)`);
    }
  });
}

async function withClient<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}

function redact(url: string): string {
  const parsed = new URL(url);
  if (parsed.password !== '') parsed.password = '***';
  return parsed.toString();
}

/** A port the OS just had free; another process could take it first, which is unlikely enough here. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}
