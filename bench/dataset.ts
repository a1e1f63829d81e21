/**
 * The benchmark's databases: a server (BENCH_DATABASE_URL, else the local one
 * on 127.0.0.1:5432 if it answers, else an embedded one under .data/), and on
 * it one database per data set, migrated and seeded once, then reused by later
 * runs while it still holds exactly the seeded rows. Rows a run adds (POST
 * /posts) are deleted at the start and end of each run, so reruns are quick.
 */
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { startEmbeddedPostgres } from '../src/dev/embedded.js';
import { migrate } from '../src/db/migrate.js';
import { createPool } from '../src/db/pool.js';
import { seed } from '../src/dev/seed.js';

export interface BenchServer {
  /** URL of a maintenance database on the server (CREATE/DROP DATABASE). */
  adminUrl: string;
  source: string;
  stop(): Promise<void>;
}

export interface DataSize {
  users: number;
  posts: number;
  comments: number;
}

export interface Dataset {
  name: string;
  url: string;
  size: DataSize;
  /** Undefined when the data set was reused. */
  seeded?: Seeded & { vacuumSeconds: number };
}

interface Seeded {
  seconds: number;
  /** How the seed bypassed the triggers, when it says. */
  mode: string;
}

/**
 * How a data set is made: migrations, then the seed. By default this
 * checkout's, in this process; a variant's are its own (bench/variants.ts).
 */
export interface Recipe {
  /** Recorded on the database: a data set made by another recipe (or an older seed) is made again. */
  shape: string;
  migrate(url: string): Promise<void>;
  seed(url: string, size: DataSize, log: (msg: string) => void): Promise<Seeded>;
}

const LOCAL = 'postgres://postgres@127.0.0.1:5432/postgres';

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function benchServer(configured: string | undefined, log: (msg: string) => void): Promise<BenchServer> {
  if (configured) return { adminUrl: configured, source: 'BENCH_DATABASE_URL', stop: async () => {} };
  if (await answers(LOCAL))
    return { adminUrl: LOCAL, source: 'local PostgreSQL on 127.0.0.1:5432', stop: async () => {} };
  log('no PostgreSQL on 127.0.0.1:5432: starting an embedded one under .data/bench-pg');
  const embedded = await startEmbeddedPostgres({
    dataDir: resolve('.data/bench-pg'),
    port: 54339,
    database: 'postgres',
  });
  return { adminUrl: embedded.url, source: 'embedded PostgreSQL (.data/bench-pg)', stop: embedded.stop };
}

export function databaseUrl(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Waits until no other bench run uses the data sets named after `name` (one
 * run's clean-up would delete the other's tokens and rows, and their loads
 * would share the machine), then holds them until the returned function is
 * called or this process ends.
 */
export async function lockDatasets(
  server: BenchServer,
  name: string,
  log: (msg: string) => void,
): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: server.adminUrl });
  await client.connect();
  const locked = async () =>
    (
      await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS ok', [
        `posts-api bench ${name}`,
      ])
    ).rows[0]!.ok;
  for (let second = 0; !(await locked()); second++) {
    if (second % 60 === 0) log(`waiting for another bench run on ${name} to end`);
    await sleep(1000);
  }
  return () => client.end();
}

/**
 * Deletes the rows a run added, a thousand ids per statement: the row triggers
 * that keep the totals exact update the same counter rows once per deleted row,
 * and within one statement each update walks every version the earlier ones
 * left, so one DELETE of 244 000 posts ran for minutes (quadratic) where these
 * batches take seconds.
 */
export async function deleteAbove(c: pg.Client, table: 'posts' | 'comments', keep: number): Promise<number> {
  // The thousand lowest ids left, not ranges of ids: a row far past the others (the demo post, id 1 000 000 000,
  // that a variant's `npm run seed` adds) made a walk of ranges a million empty statements long.
  const batch = `DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} WHERE id > $1 ORDER BY id LIMIT 1000)`;
  const numbered = await hasSequencer(c);
  let deleted = 0;
  for (;;) {
    const { rowCount } = await c.query(batch, [keep]);
    if (!rowCount) return deleted;
    deleted += rowCount;
    // What the service's sequencer would have done meanwhile: each batch's delete trigger looks up the events of
    // its rows in the queue, which otherwise holds every earlier batch's (1 000 more each: quadratic).
    if (numbered) await c.query('SELECT number_events()');
  }
}

/** A variant's schema may have no event queue. */
async function hasSequencer(c: pg.Client): Promise<boolean> {
  const { rows } = await c.query<{ ok: boolean }>(`SELECT to_regproc('number_events') IS NOT NULL AS ok`);
  return rows[0]!.ok;
}

/**
 * Removes what benchmark runs add (posts and comments from the write
 * scenarios; tokens from log-ins) and refreshes visibility/statistics. The
 * seed numbers rows from 1, so added rows are those past the data set's size.
 * A variant's schema may lack some of these tables.
 */
export async function cleanUp(dataset: Dataset): Promise<void> {
  await withClient(dataset.url, async (c) => {
    const { rows } = await c.query<{ name: string }>(
      `SELECT name FROM unnest($1::text[]) name WHERE to_regclass(name) IS NOT NULL`,
      [['posts', 'comments', 'comment_counts', 'deleted_posts', 'deleted_comments', 'tokens', 'counters', 'users']],
    );
    const has = new Set(rows.map((r) => r.name));
    await disableWebhooks(c);
    // Autovacuum may be off: the delete triggers find the deleted rows' events by post, and with the statistics of
    // the seed (no events) the planner reads the whole event log instead, once per batch.
    if (await hasSequencer(c)) await c.query('ANALYZE events');
    // Comments first: their triggers give the posts their seeded comment counts back.
    const comments = await deleteAbove(c, 'comments', dataset.size.comments);
    if (has.has('deleted_comments'))
      await c.query('DELETE FROM deleted_comments WHERE id > $1', [dataset.size.comments]);
    const posts = await deleteAbove(c, 'posts', dataset.size.posts);
    if (has.has('deleted_posts')) await c.query('DELETE FROM deleted_posts WHERE id > $1', [dataset.size.posts]);
    if (has.has('tokens')) await c.query('DELETE FROM tokens');
    // Autovacuum may be off (it is on this machine's server): keep the
    // visibility map and statistics as a steady-state database has them.
    if (comments || posts) {
      await c.query('SET statement_timeout = 0');
      await c.query(`VACUUM (ANALYZE) ${[...has].join(', ')}`);
    }
  });
}

/**
 * Autovacuum's part, on a server that has it off (this machine's has): the event queue's dead rows,
 * which every numbering call walks until a vacuum (2.1 ms a call after a full run, 0.21 ms vacuumed),
 * so that a run's later write windows do not pay for its earlier ones, as they would not when deployed.
 */
export async function vacuumQueue(dataset: Pick<Dataset, 'url'>): Promise<void> {
  await withClient(dataset.url, async (c) => {
    const { rows } = await c.query<{ go: boolean }>(
      `SELECT current_setting('autovacuum') = 'off' AND to_regclass('events_pending') IS NOT NULL AS go`,
    );
    if (rows[0]!.go) await c.query('VACUUM events_pending');
  });
}

/**
 * The seed's demo webhook points at a host that does not exist: left active,
 * every post the clean-up deletes would queue a delivery that the worker keeps
 * retrying while the scenarios run. The bench measures the API, not that.
 */
async function disableWebhooks(c: pg.Client): Promise<void> {
  // A variant's schema may have no webhooks.
  const { rows } = await c.query<{ ok: boolean }>(`SELECT to_regclass('webhooks') IS NOT NULL AS ok`);
  if (!rows[0]!.ok) return;
  await c.query(`UPDATE webhooks SET status = 'disabled' WHERE status <> 'disabled'`);
  await c.query(`DELETE FROM webhook_deliveries WHERE status = 'pending'`);
}

/**
 * The seed's shape, recorded on the database when seeded: a data set of the
 * right size but an older shape (e.g. before the seed had a rare word) is
 * seeded again. Bump it whenever the seed's output changes.
 */
export const SHAPE = 'posts-api bench data set, shape 6';

/** This checkout's migrations and seed, run in this process. */
const OWN_RECIPE: Recipe = {
  shape: SHAPE,
  migrate: (url) => migrate(url),
  seed: async (url, size, log) => {
    const pool = createPool(url, 1);
    try {
      let last = '';
      const onProgress = ({ phase }: { phase: string }) => {
        if (phase !== last) log(`${new URL(url).pathname.slice(1)}: seeding (${phase})`);
        last = phase;
      };
      return await seed(pool, { ...size, onProgress });
    } finally {
      await pool.end();
    }
  },
};

/** The database's recorded shape, if it has the posts table. */
export async function shapeOf(url: string): Promise<string | undefined> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ ok: boolean; shape: string | null }>(
      `SELECT to_regclass('posts') IS NOT NULL AS ok, shobj_description(d.oid, 'pg_database') AS shape
       FROM pg_database d WHERE d.datname = current_database()`,
    );
    return rows[0]?.ok ? (rows[0].shape ?? undefined) : undefined;
  });
}

/** Whether the seeded rows are all there (rows a run added are past the data set's size). */
export async function holdsExactly(url: string, size: DataSize): Promise<boolean> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ users: string; posts: string; comments: string }>(
      `SELECT (SELECT count(*) FROM users) AS users, (SELECT count(*) FROM posts WHERE id <= $1) AS posts,
        (SELECT count(*) FROM comments WHERE id <= $2) AS comments`,
      [size.posts, size.comments],
    );
    const r = rows[0]!;
    return Number(r.users) === size.users && Number(r.posts) === size.posts && Number(r.comments) === size.comments;
  });
}

export async function databaseExists(server: BenchServer, name: string): Promise<boolean> {
  return withClient(
    server.adminUrl,
    async (c) => (await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1,
  );
}

/** Drops database `name` if it exists and creates it empty. */
export async function recreateDatabase(server: BenchServer, name: string): Promise<string> {
  await withClient(server.adminUrl, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${c.escapeIdentifier(name)} WITH (FORCE)`);
    await c.query(`CREATE DATABASE ${c.escapeIdentifier(name)}`);
  });
  return databaseUrl(server.adminUrl, name);
}

/**
 * Runs `migrate` on a database kept from an earlier run: false when it holds migrations this
 * checkout no longer ships (the baseline replaced the first nine), so it must be made again;
 * any other failure is thrown.
 */
export async function migratesInPlace(migrate: (url: string) => Promise<void>, url: string): Promise<boolean> {
  try {
    await migrate(url);
    return true;
  } catch (error) {
    if (/^Not run migration .* is preceding already run migration/.test((error as Error).message)) return false;
    throw error;
  }
}

/**
 * The data set in database `name`, reused when `recipe` made it and it holds
 * exactly `size`, else made afresh by `recipe`.
 */
export async function ensureDataset(
  server: BenchServer,
  name: string,
  size: DataSize,
  log: (msg: string) => void,
  recipe: Recipe = OWN_RECIPE,
): Promise<Dataset> {
  const url = databaseUrl(server.adminUrl, name);
  if (
    (await databaseExists(server, name)) &&
    (await shapeOf(url)) === recipe.shape &&
    (await holdsExactly(url, size))
  ) {
    const dataset: Dataset = { name, url, size };
    // Migrations added since it was seeded keep the data; one this checkout no longer ships does not.
    const migrated = await migratesInPlace(recipe.migrate, url);
    if (!migrated) log(`${name}: made again, it holds migrations this checkout no longer ships`);
    if (migrated) {
      await cleanUp(dataset);
      log(`${name}: reusing ${size.posts} posts, ${size.comments} comments, ${size.users} users`);
      return dataset;
    }
  }

  await recreateDatabase(server, name);
  await recipe.migrate(url);
  const seeded = await recipe.seed(url, size, log);
  const started = performance.now();
  await withClient(url, async (c) => {
    await c.query('SET statement_timeout = 0');
    await disableWebhooks(c);
    await c.query('VACUUM (ANALYZE)');
    await c.query(`COMMENT ON DATABASE ${c.escapeIdentifier(name)} IS ${c.escapeLiteral(recipe.shape)}`);
  });
  const vacuumSeconds = (performance.now() - started) / 1000;
  log(`${name}: seeded in ${seeded.seconds.toFixed(1)} s, VACUUM ANALYZE ${vacuumSeconds.toFixed(1)} s`);
  return { name, url, size, seeded: { ...seeded, vacuumSeconds } };
}
