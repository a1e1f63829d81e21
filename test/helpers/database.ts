/**
 * One fresh database per test file, cloned from the template the global
 * setup migrated: a file-level copy is much cheaper than re-running the
 * migrations, and files running in parallel never share data.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { inject } from 'vitest';

/** Posts whose kept comment total (comment_counts) differs from their comments: a column `n`. */
export const MISCOUNTED_POSTS = `SELECT count(*)::int AS n FROM posts p
  WHERE COALESCE((SELECT n FROM comment_counts k WHERE k.post_id = p.id), 0) <> (SELECT count(*) FROM comments c WHERE c.post_id = p.id)`;

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

// PostgreSQL refuses to copy a template while any other session is connected
// to it (SQLSTATE 55006); the template allows no connections, but autovacuum
// may still be visiting it for a moment.
const OBJECT_IN_USE = '55006';
const DUPLICATE_DATABASE = '42P04';
const CREATE_ATTEMPTS = 20;

/** A name for a test database of this run (the run's teardown drops what is left of them). */
export const testDatabaseName = () => `${inject('databaseTestPrefix')}${randomBytes(4).toString('hex')}`;

/** The URL of the test database `name` on the test server. */
export function testDatabaseUrl(name: string): string {
  const url = new URL(inject('databaseAdminUrl'));
  url.pathname = `/${encodeURIComponent(name)}`;
  return url.toString();
}

/** A migrated database (or, with `empty`, one no migration ever touched), named `name`. */
export async function createTestDatabase(name = testDatabaseName(), { empty = false } = {}): Promise<TestDatabase> {
  const adminUrl = inject('databaseAdminUrl');
  const template = empty ? 'template0' : inject('databaseTemplate');

  await withAdmin(adminUrl, async (client) => {
    const sql = `CREATE DATABASE ${client.escapeIdentifier(name)} TEMPLATE ${client.escapeIdentifier(template)}`;
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query(sql);
        return;
      } catch (error) {
        const { code } = error as { code?: unknown };
        // Created by a try whose connection then ended (withAdmin tries again): the name is this file's alone.
        if (code === DUPLICATE_DATABASE) return;
        if (code !== OBJECT_IN_USE || attempt >= CREATE_ATTEMPTS) throw error;
        await sleep(50 * attempt);
      }
    }
  });

  return {
    url: testDatabaseUrl(name),
    // FORCE ends connections a test forgot to close (e.g. a pool still open).
    drop: () =>
      withAdmin(adminUrl, (client) =>
        client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`),
      ),
  };
}

/**
 * Set-up and teardown wait out a server that is restarting (57P03 "not yet accepting connections", or the
 * connection ended under them): one CI run through testcontainers saw its PostgreSQL restart once under load,
 * and every file that was creating its database then failed before testing anything.
 */
const RESTARTING = /^57P03$|Connection terminated|ECONNREFUSED|ECONNRESET/;
const RESTART_WAIT_MS = 30_000;

async function withAdmin(adminUrl: string, fn: (client: Client) => Promise<unknown>): Promise<void> {
  const deadline = performance.now() + RESTART_WAIT_MS;
  for (;;) {
    try {
      await onceWithAdmin(adminUrl, fn);
      return;
    } catch (error) {
      const { code, message } = error as { code?: string; message?: string };
      const restarting = RESTARTING.test(code ?? '') || RESTARTING.test(message ?? '');
      if (!restarting || performance.now() > deadline) throw error;
      await sleep(500);
    }
  }
}

async function onceWithAdmin(adminUrl: string, fn: (client: Client) => Promise<unknown>): Promise<void> {
  const client = new Client({ connectionString: adminUrl });
  // A connection ended by the server emits 'error' on the client too: the failing query reports it.
  client.on('error', () => undefined);
  await client.connect();
  try {
    await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The app's database settings for a test database at `url`. With the scale
 * topology (test/helpers/scale-topology.sh: TEST_DATABASE_URL is PgBouncer in
 * transaction mode), LISTEN goes to the primary directly
 * (TEST_DATABASE_LISTEN_URL) and reads to the replicas (TEST_DATABASE_READ_URL).
 * Statements stay named, the default, also through PgBouncer 1.18: the pool
 * finds out that it loses them (src/db/pool.ts).
 */
export function onTopology(url: string): {
  databaseUrl: string;
  databaseListenUrl?: string;
  databaseReadUrls: string[];
} {
  const database = new URL(url).pathname;
  const same = (server: string) => {
    const moved = new URL(server.trim());
    moved.pathname = database;
    return moved.toString();
  };
  const listen = process.env.TEST_DATABASE_LISTEN_URL;
  const read = process.env.TEST_DATABASE_READ_URL;
  return {
    databaseUrl: url,
    ...(listen ? { databaseListenUrl: same(listen) } : {}),
    databaseReadUrls: read ? read.split(',').map(same) : [],
  };
}

/** The same settings as a server process takes them (its environment). */
export function databaseEnv(url: string): Record<string, string> {
  const topology = onTopology(url);
  return {
    DATABASE_URL: url,
    ...(topology.databaseListenUrl ? { DATABASE_LISTEN_URL: topology.databaseListenUrl } : {}),
    ...(topology.databaseReadUrls.length > 0 ? { DATABASE_READ_URL: topology.databaseReadUrls.join(',') } : {}),
  };
}
