/**
 * The bench's clean-up (bench/dataset.ts) deletes the rows a run added through the service's own triggers, with no
 * service running: nothing numbers the events those deletes queue. Each batch's delete trigger looks up its rows'
 * events in the queue, and a queue holding every earlier batch's events made each batch of 1 000 slower (about 15 s at
 * 64 000–71 000 queued, and the queue grew by 1 000 a batch: over an hour for 172 000 comments, extrapolated);
 * numbered between batches, as the sequencer would, they took 73 s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { cleanUp } from '../../bench/dataset.js';
import { createPool } from '../../src/db/pool.js';
import { seed } from '../../src/dev/seed.js';
import { MISCOUNTED_POSTS, createTestDatabase, testDatabaseName, type TestDatabase } from '../helpers/database.js';

const SIZE = { users: 3, posts: 20, comments: 40 };
/** More than one batch of the clean-up's 1 000. */
const ADDED = 2_500;

let database: TestDatabase;
let pool: pg.Pool;
const name = testDatabaseName();

beforeAll(async () => {
  database = await createTestDatabase(name);
  pool = createPool(database.url, 2);
  await seed(pool, SIZE);
  // What a run's comment scenario leaves: comments on the seeded posts, each with its event queued.
  await pool.query(
    `INSERT INTO comments (post_id, author_id, body)
     SELECT 1 + n % $1, 1 + n % $2, 'added by a run ' || n FROM generate_series(1, $3) n`,
    [SIZE.posts, SIZE.users, ADDED],
  );
}, 60_000);

afterAll(async () => {
  await pool?.end();
  await database?.drop();
});

async function one<T>(text: string): Promise<T> {
  const { rows } = await pool.query(text);
  return rows[0] as T;
}

describe('the bench clean-up', () => {
  it('gives back the seeded rows and numbers the events its deletes queue, batch by batch', async () => {
    expect(await one('SELECT count(*)::int AS queued FROM events_pending')).toEqual({ queued: ADDED });

    await cleanUp({ name, url: database.url, size: SIZE });

    expect(await one('SELECT count(*)::int AS comments FROM comments')).toEqual({ comments: SIZE.comments });
    expect(await one(MISCOUNTED_POSTS)).toEqual({ n: 0 });
    // Every created and deleted event numbered: none left for the next batch's trigger to walk.
    expect(await one('SELECT count(*)::int AS queued FROM events_pending')).toEqual({ queued: 0 });
    expect(
      await one(`SELECT count(*) FILTER (WHERE type = 'comment.created')::int AS created,
        count(*) FILTER (WHERE type = 'comment.deleted')::int AS deleted FROM events`),
    ).toEqual({ created: ADDED, deleted: ADDED });
    // The deleted comments' bodies are gone from their created events (docs/api.md §12).
    expect(
      await one(`SELECT count(*)::int AS bodies FROM events WHERE type = 'comment.created' AND data ? 'body'`),
    ).toEqual({ bodies: 0 });
  });
});
