/**
 * Smoke test for the test plumbing itself: a per-file database exists, is a
 * clone of the migrated template, and can be dropped.
 */
import { Client } from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

let db: TestDatabase;
let client: Client;

beforeAll(async () => {
  db = await createTestDatabase();
  client = new Client({ connectionString: db.url });
  await client.connect();
});

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

it('starts from the migrated template', async () => {
  const { rows } = await client.query<{ name: string }>('SELECT name FROM pgmigrations ORDER BY id');
  expect(rows.length).toBeGreaterThan(0);
});

it('is a database of its own, not the template', async () => {
  const { rows } = await client.query<{ db: string }>('SELECT current_database() AS db');
  expect(rows[0]?.db).not.toMatch(/_tpl_/);
});

it('drops cleanly, even with a connection still open', async () => {
  const other = await createTestDatabase();
  const open = new Client({ connectionString: other.url });
  await open.connect();
  open.on('error', () => {}); // the forced drop terminates this session
  await other.drop();
  const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [
    new URL(other.url).pathname.slice(1),
  ]);
  expect(rowCount).toBe(0);
  await open.end().catch(() => {});
});
