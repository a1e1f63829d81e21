/**
 * What an instance's session holds beyond its log-ins, and how it is kept up
 * between windows: the posts its writes edit, the posts its deletes remove
 * (used up by the load, so topped up before each window), and a snapshot token
 * of its post list (docs/api.md §5).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { vacuumQueue, withClient } from './dataset.js';
import { log } from './processes.js';

/** A database's own log-ins and posts: each service database has its own, and so has the peer's. */
export interface Session {
  /** Bearer tokens of the logged-in users, in the order of Context.userIds. */
  tokens: string[];
  /** Per logged-in user, posts of theirs the bench created for PATCH (deleted after the run). */
  ownPosts: number[][];
  /** Posts of theirs the bench created for DELETE to remove. */
  doomed: Doomed;
  /** A token from the Link header of `GET /posts` (undefined: the instance hands out none). */
  snapshot?: { token: string; takenAt: number };
  /** The instance's database. */
  databaseUrl: string;
}

/**
 * Creates `counts[user]` posts for each user through POST /posts on `url`,
 * `parallel` requests at a time per user; `headers(user)` authenticates, if
 * needed. Their ids, per user. They are deleted with the run's other posts
 * (bench/dataset.ts cleanUp: every id past the data set's).
 */
export async function createPosts(
  url: string,
  counts: number[],
  body: (user: number) => string,
  headers: (user: number) => Record<string, string> = () => ({}),
  parallel = 1,
): Promise<number[][]> {
  return Promise.all(
    counts.map(async (count, user) => {
      const ids: number[] = [];
      let started = 0;
      const worker = async () => {
        while (started < count) {
          started += 1;
          const res = await fetch(`${url}/posts`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...headers(user) },
            body: body(user),
          });
          if (res.status !== 200 && res.status !== 201)
            throw new Error(`creating a post for the bench's writes on ${url}: ${res.status} ${await res.text()}`);
          // Platformatic renders ids as strings.
          ids.push(Number(((await res.json()) as { id: number | string }).id));
        }
      };
      await Promise.all(Array.from({ length: Math.min(parallel, count) }, worker));
      return ids;
    }),
  );
}

/**
 * The posts DELETE removes, per logged-in user: each request takes one, and
 * before each window the pool is topped up to what the window can use.
 */
export interface Doomed {
  byUser: number[][];
  /** How many the last top-up left, and the window it was for (s): what the window used up gives the pace. */
  filled: number;
  seconds: number;
  /** The fastest pace measured so far (deletes per second). */
  fastest: number;
  /** A user ran out during a window: logged once. */
  ranOut: boolean;
}

export const noDoomed = (users: number): Doomed => ({
  byUser: Array.from({ length: users }, () => []),
  filled: 0,
  seconds: 0,
  fastest: 0,
  ranOut: false,
});

/**
 * Deletes per second provisioned for at least: well above the fastest writes measured (3 548
 * creates/s, bench/RESULTS.md), so that a slow warm-up does not leave a fast window short. Only
 * the first top-up creates that many; the others replace what the window before used up.
 */
const LEAST_PACE = 6_000;
/** Over the fastest pace measured: the machine's speed drifts by tens of percent from one window to the next. */
const MARGIN = 2;
/** Requests in flight per user while topping up (8 users: 32, as the load). */
const PARALLEL = 4;

/** The next post `user` deletes; once none is left, an id no post has (a 404: the run fails, and says why). */
export function nextDoomed(d: Doomed, user: number): number {
  const id = d.byUser[user]!.pop();
  if (id !== undefined) return id;
  if (!d.ranOut)
    log(`delete: user ${user + 1} ran out of posts to delete: the load outpaced the top-up (bench/session.ts)`);
  d.ranOut = true;
  return 0;
}

/**
 * Before a window of `seconds` of deletes: creates each user's posts up to
 * what that window can use (through POST /posts on `url`, as the user), then
 * waits for their events to be numbered and vacuums the event queue, so that
 * the window pays for neither.
 */
export async function topUpDoomed(
  s: Pick<Session, 'doomed' | 'tokens' | 'databaseUrl'>,
  url: string,
  seconds: number,
  body: string,
): Promise<void> {
  const d = s.doomed;
  const left = () => d.byUser.reduce((n, ids) => n + ids.length, 0);
  if (d.seconds > 0) d.fastest = Math.max(d.fastest, (d.filled - left()) / d.seconds);
  const pace = Math.max(LEAST_PACE, MARGIN * d.fastest);
  const perUser = Math.ceil((pace * seconds) / d.byUser.length);
  const created = await createPosts(
    url,
    d.byUser.map((ids) => Math.max(0, perUser - ids.length)),
    () => body,
    (user) => ({ authorization: `Bearer ${s.tokens[user]!}` }),
    PARALLEL,
  );
  created.forEach((ids, user) => d.byUser[user]!.push(...ids));
  d.filled = left();
  d.seconds = seconds;
  await drainQueue(s.databaseUrl);
}

/** Waits (up to 10 s) until the service has numbered every pending event, then vacuums the queue. */
async function drainQueue(databaseUrl: string): Promise<void> {
  await withClient(databaseUrl, async (c) => {
    const { rows } = await c.query<{ has: boolean }>(`SELECT to_regclass('events_pending') IS NOT NULL AS has`);
    if (!rows[0]!.has) return;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const { rows: pending } = await c.query<{ any: boolean }>('SELECT EXISTS (SELECT 1 FROM events_pending) AS any');
      if (!pending[0]!.any) break;
      await sleep(50);
    }
  });
  await vacuumQueue({ url: databaseUrl });
}

/** The snapshot token in the Link header of `GET {list}` (page 1) on `url`, if it hands one out. */
export async function takeSnapshot(url: string, list = '/posts'): Promise<Session['snapshot']> {
  const res = await fetch(`${url}${list}`);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`GET ${list} on ${url} answered ${res.status}`);
  const found = /[?&]snapshot=([^&>]+)/.exec(res.headers.get('link') ?? '');
  return found ? { token: decodeURIComponent(found[1]!), takenAt: Date.now() } : undefined;
}
