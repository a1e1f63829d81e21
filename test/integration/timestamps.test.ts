/**
 * The pool reads a timestamptz as the API shows it, byte for byte what iso_utc() (to_char) gives:
 * in its own UTC sessions (the fast path) and in a session whose zone a pooler or role set otherwise.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { createPool } from '../../src/db/pool.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool(db.url, 2);
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

const VALUES = [
  '2026-11-22 10:00:00+00',
  '2026-11-22 10:00:00.1+00',
  '2026-11-22 10:00:00.12+00',
  '2026-11-22 10:00:00.123456+00',
  '2026-11-22 10:00:00.999999+00',
  '2026-11-22 23:59:59.0005+05:30',
  '1999-12-31 23:59:59.9995-08',
  '0999-01-01 00:00:00.001+00',
];

async function both(zone?: string): Promise<{ read: string; shown: string }[]> {
  const client = await pool.connect();
  try {
    if (zone) await client.query(`SET TimeZone = '${zone}'`);
    const { rows } = await client.query<{ read: string; shown: string }>(
      'SELECT t AS read, iso_utc(t) AS shown FROM unnest($1::timestamptz[]) AS v(t)',
      [VALUES],
    );
    return rows;
  } finally {
    if (zone) await client.query('RESET TimeZone');
    client.release();
  }
}

it('reads timestamps as iso_utc shows them, in its UTC sessions', async () => {
  const rows = await both();
  expect(rows.map((r) => r.read)).toEqual(rows.map((r) => r.shown));
  expect(rows[0]).toEqual({ read: '2026-11-22T10:00:00.000Z', shown: '2026-11-22T10:00:00.000Z' });
  expect(rows[4]!.read).toBe('2026-11-22T10:00:00.999Z');
});

it('reads them the same in a session in another zone', async () => {
  const rows = await both('Asia/Kolkata');
  expect(rows.map((r) => r.read)).toEqual(rows.map((r) => r.shown));
});
