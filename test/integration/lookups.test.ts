/**
 * Batched point lookups (src/db/lookups.ts, dataloader): lookups arriving together run
 * as one statement, each gets its own row (or undefined), a failure reaches
 * every one of them, and a transaction's client sees its own rows.
 */
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { lookup } from '../../src/db/lookups.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

let db: TestDatabase;
let pool: pg.Pool;
let acquired = 0;

type Item = { id: number; label: string };
const findItem = lookup<Item>({
  byId: 'SELECT id, label FROM lookup_items WHERE id = $1',
  byIds: 'SELECT id, label FROM lookup_items WHERE id = ANY($1::bigint[])',
});

beforeAll(async () => {
  db = await createTestDatabase();
  // Behind PgBouncer 1.18 (the CI topology) as the app: named, until the pool finds them lost.
  pool = createPool(db.url, 2);
  pool.on('acquire', () => {
    acquired += 1;
  });
  await pool.query('CREATE TABLE lookup_items (id bigint PRIMARY KEY, label text NOT NULL)');
  await pool.query("INSERT INTO lookup_items SELECT i, 'item ' || i FROM generate_series(1, 10) AS i");
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

it('answers lookups made together with one statement, each with its own row', async () => {
  const before = acquired;
  const ids = [3, 7, 42, 3, 1, 10];
  const rows = await Promise.all(ids.map((id) => findItem(pool, id)));
  expect(rows).toEqual([
    { id: 3, label: 'item 3' },
    { id: 7, label: 'item 7' },
    undefined,
    { id: 3, label: 'item 3' },
    { id: 1, label: 'item 1' },
    { id: 10, label: 'item 10' },
  ]);
  expect(acquired - before).toBe(1);
});

it('answers a lookup alone, and a missing id with undefined', async () => {
  expect(await findItem(pool, 5)).toEqual({ id: 5, label: 'item 5' });
  expect(await findItem(pool, 99)).toBeUndefined();
});

it('answers the lookups of one turn with one statement while every connection is taken, and later ones too', async () => {
  const held = await Promise.all([pool.connect(), pool.connect()]);
  const before = acquired;
  const first = [findItem(pool, 1), findItem(pool, 2)];
  await new Promise((resolve) => setImmediate(resolve));
  const later = [findItem(pool, 4)];
  await new Promise((resolve) => setTimeout(resolve, 20));
  for (const client of held) client.release();
  expect((await Promise.all([...first, ...later])).map((row) => row?.id)).toEqual([1, 2, 4]);
  expect(acquired - before).toBe(2); // one statement per turn of the event loop
});

it('rejects every lookup of a failed batch, and the pool serves the next ones', async () => {
  const broken = lookup<Item>({
    byId: 'SELECT id FROM no_such_table WHERE id = $1',
    byIds: 'SELECT id FROM no_such_table WHERE id = ANY($1::bigint[])',
  });
  const results = await Promise.allSettled([1, 2].map((id) => broken(pool, id)));
  expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  expect((results[0] as PromiseRejectedResult).reason).toMatchObject({ code: '42P01' });
  expect(await findItem(pool, 6)).toEqual({ id: 6, label: 'item 6' });
});

it('runs on a transaction client as a plain statement, seeing its uncommitted rows', async () => {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query("INSERT INTO lookup_items VALUES (11, 'item 11')");
    expect(await findItem(client, 11)).toEqual({ id: 11, label: 'item 11' });
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
});
