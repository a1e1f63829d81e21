/**
 * A pooled connection whose server ends it at the moment the pool hands it out
 * (PostgreSQL killed, the backend terminated) must not end the process: the
 * request that got it fails with a 503, and the next ones are served. Found by
 * `npm run chaos` (scenario 1): kill -9 of PostgreSQL under writes shut the
 * service down now and then.
 */
import type { Socket } from 'node:net';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createTestDatabase, onTopology, type TestDatabase } from '../helpers/database.js';
import { testConfig } from '../helpers/factories.js';

let db: TestDatabase;
let app: FastifyInstance;
let admin: pg.Client;
/** The database the app's pool talks to directly (behind PgBouncer, the primary's address). */
let direct: string;

beforeAll(async () => {
  db = await createTestDatabase();
  // Through PgBouncer an idle client holds no server connection to terminate: the pool goes to the server itself here.
  direct = onTopology(db.url).databaseListenUrl ?? db.url;
  // No webhook worker: it would take pooled connections too, and the test needs the one it terminated handed out.
  const config = testConfig({ WEBHOOK_CONCURRENCY: '0' });
  app = (await buildApp({ ...config, databaseUrl: direct })) as unknown as FastifyInstance;
  await app.ready();
  admin = new pg.Client({ connectionString: direct });
  await admin.connect();
});

afterAll(async () => {
  await admin?.end();
  await app?.close();
  await db?.drop();
});

it('a connection ended by the server just as the pool hands it out is discarded; the process goes on', async () => {
  const client = await app.db.connect();
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  client.release();

  // The server's FATAL message waits in the idle connection's socket, unread...
  const stream = (client as unknown as { connection: { stream: Socket } }).connection.stream;
  stream.pause();
  await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
  // A paused socket still reads what arrives into its buffer, where nothing consumes it.
  await expect.poll(() => stream.readableLength).toBeGreaterThan(0);
  // ...and is read right after the pool hands the connection out, before `await connect()` resumes.
  app.db.once('acquire', () => stream.resume());
  const handedOut = await app.db.connect();
  expect(handedOut).toBe(client);
  await expect(handedOut.query('SELECT 1')).rejects.toThrow(/not queryable|terminat/);
  handedOut.release(new Error('broken'));

  const res = await app.inject({ url: '/health/ready' });
  expect(res.statusCode).toBe(200);
});
