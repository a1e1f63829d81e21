/**
 * The run's setup: ids and pages picked from the data set for the scenarios,
 * log-ins, own posts and a snapshot token on a service, and the pgbench
 * scripts (the SQL the service sends for each scenario).
 */
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { DEMO_PASSWORD } from '../src/dev/seed.js';
import type { Dataset } from './dataset.js';
import { captureQueries, pgbenchScript, writeScript } from './pgbench.js';
import type { Child } from './processes.js';
import type { Scenario } from './report.js';
import { POST_BODY, type Context } from './scenarios.js';
import { createPosts, noDoomed, takeSnapshot, type Session } from './session.js';

const LOGINS = 8;
/** Posts each logged-in user creates at the start, for PATCH to spread over (no hot row). */
const OWN_POSTS = 16;
const HOT_POSTS_COUNT = 1_000;

type Picked = Omit<
  Context,
  'big' | 'edge' | 'small' | 'baseline' | 'peer' | 'sessions' | 'monitor' | 'databases' | keyof Session | 'userIds'
>;

export async function one<T>(url: string, text: string, values: unknown[] = []): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows[0] as T;
  } finally {
    await client.end();
  }
}

/** Ids for the scenarios; `depth`: how many posts deep the deep cursor and offset pages go (the middle of the list). */
export async function scenarioContext(big: Dataset, depth: number): Promise<Picked> {
  const popular = await one<{ id: number }>(
    big.url,
    `SELECT COALESCE((SELECT post_id FROM comment_counts ORDER BY n DESC, post_id LIMIT 1), (SELECT min(id) FROM posts))::int AS id`,
  );
  // The least prolific author who still has a 20th page (or the most prolific, on a small data set).
  const author = await one<{ id: number; posts: number }>(
    big.url,
    `SELECT author_id::int AS id, n::int AS posts FROM author_post_counts
       ORDER BY n >= 400 DESC, CASE WHEN n >= 400 THEN n END ASC, n DESC LIMIT 1`,
  );
  // The most prolific author (the million posts' has ~31 000): their list's middle, last and random pages.
  // The seed's is user 1, also the first logged-in user: the run's creates add to their list, after these pages.
  const prolific = await one<{ id: number; posts: number }>(
    big.url,
    'SELECT author_id::int AS id, n::int AS posts FROM author_post_counts ORDER BY n DESC, author_id LIMIT 1',
  );
  const nth = (n: number) =>
    one<{ id: number }>(big.url, 'SELECT id::int FROM posts ORDER BY id OFFSET $1 - 1 LIMIT 1', [n]);
  const [deep, second] = [await nth(depth), await nth(20)];
  const last = await one<{ after: string; before: string }>(
    big.url,
    `SELECT to_char((max(created_at) - interval '7 days') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS after,
       to_char((max(created_at) + interval '1 second') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS before FROM posts`,
  );
  return {
    week: last,
    popularPost: popular.id,
    author: { id: author.id, page: Math.max(1, Math.min(20, Math.floor(author.posts / 20))) },
    deepCursor: deep.id,
    secondCursor: second.id,
    deepPage: depth / 20 + 1,
    // The `last` link's page of the seeded list; the run's own posts come after it.
    lastPage: Math.ceil(big.size.posts / 20),
    prolific: {
      ...prolific,
      middlePage: Math.floor(prolific.posts / 2 / 20) + 1,
      lastPage: Math.max(1, Math.ceil(prolific.posts / 20)),
    },
    postIds: [1, big.size.posts],
    hotPostIds: [1, HOT_POSTS_COUNT],
    coldPostIds: [HOT_POSTS_COUNT + 1, big.size.posts],
  };
}

/**
 * Logs the first users in on `service`, creates their own posts and takes a
 * snapshot token from `GET /posts`: the session of its database. The posts
 * DELETE removes are created before each of its windows (bench/session.ts).
 */
export async function openSession(service: Child, dataset: Dataset): Promise<Session & { userIds: number[] }> {
  const users = await logIn(service, dataset);
  const ownPosts = await createOwnPosts(
    service.url,
    users.tokens.length,
    () => POST_BODY,
    (user) => ({ authorization: `Bearer ${users.tokens[user]!}` }),
  );
  const snapshot = await takeSnapshot(service.url);
  return { ...users, ownPosts, doomed: noDoomed(users.tokens.length), snapshot, databaseUrl: dataset.url };
}

async function logIn(service: Child, dataset: Dataset): Promise<{ tokens: string[]; userIds: number[] }> {
  const client = new pg.Client({ connectionString: dataset.url });
  await client.connect();
  const { rows } = await client.query<{ id: number; email: string }>(
    'SELECT id::int, email FROM users ORDER BY id LIMIT $1',
    [LOGINS],
  );
  await client.end();
  const tokens = await Promise.all(
    rows.map(async ({ email }) => {
      const res = await fetch(`${service.url}/tokens`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password: DEMO_PASSWORD }),
      });
      if (res.status !== 201) throw new Error(`log-in as ${email} failed: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { token: string }).token;
    }),
  );
  return { tokens, userIds: rows.map((r) => r.id) };
}

/**
 * Each user's own posts for PATCH, created through POST /posts on `url`
 * (deleted with the run's other posts); `headers(user)` authenticates, if needed.
 */
export function createOwnPosts(
  url: string,
  users: number,
  body: (user: number) => string,
  headers: (user: number) => Record<string, string> = () => ({}),
): Promise<number[][]> {
  return createPosts(url, Array<number>(users).fill(OWN_POSTS), body, headers);
}

/**
 * Sends one request of each scenario through the production app in this
 * process, recording its SQL. An authenticated scenario gets one script per
 * logged-in user (pgbench picks one at random per transaction), so the
 * database ceiling spreads its writes over the same users as the load does.
 */
export async function pgbenchScripts(
  ctx: Context,
  datasets: Record<'big' | 'small', Dataset>,
  scenarios: Scenario<Context>[],
  dir: string,
): Promise<Map<string, { files: string[]; url: string }>> {
  const scripts = new Map<string, { files: string[]; url: string }>();
  for (const on of ['big', 'small'] as const) {
    // No webhook worker: its poll goes
    // through the same pool and was once recorded into a request's script.
    const config = loadConfig({
      LOG_LEVEL: 'silent',
      RATE_LIMIT_MAX: '1000000',
      RATE_LIMIT_AUTH_MAX: '1000000',
      WEBHOOK_CONCURRENCY: '0',
    });
    const app = await buildApp({ ...config, databaseUrl: datasets[on].url, pgPoolMax: 1 });
    try {
      await app.ready();
      for (const s of scenarios.filter((x) => x.on === on && x.pgbench !== false)) {
        const range = s.randomId?.(ctx);
        const sampleId = range ? Math.floor((range[0] + range[1]) / 2) : 0;
        const inSql = s.randomIdInSql;
        const files: string[] = [];
        for (const [k, token] of (s.authenticated ? ctx.tokens : [undefined]).entries()) {
          const url = s.path(ctx, k).replace(':id', String(sampleId));
          const payload = s.body?.(ctx, k);
          const send = () =>
            app.inject({
              method: s.method,
              url,
              headers: {
                ...(token ? { authorization: `Bearer ${token}` } : {}),
                ...(payload ? { 'content-type': 'application/json' } : {}),
              },
              payload,
            });
          // A read once before, so that what it records is what the load repeats: a common word's first page
          // counts its matches, and the ones after it do not (src/db/pagination/offset.ts).
          if (s.method === 'GET') await send();
          let status = 0;
          const queries = await captureQueries(app.db, async () => {
            status = (await send()).statusCode;
          });
          if (status < 200 || status >= 300) throw new Error(`capturing the SQL of ${s.id}: ${url} answered ${status}`);
          const script = pgbenchScript(queries, {
            title: `${s.method} ${url} — ${s.title}${token ? ` (user ${k + 1} of ${ctx.tokens.length})` : ''}`,
            randomId: range
              ? { value: inSql ? inSql.value(sampleId) : sampleId, range, expression: inSql?.expression }
              : undefined,
          });
          files.push(await writeScript(dir, token ? `${s.id}-${k + 1}` : s.id, script));
        }
        scripts.set(s.id, { files, url: datasets[on].url });
      }
    } finally {
      await app.close();
    }
  }
  return scripts;
}
