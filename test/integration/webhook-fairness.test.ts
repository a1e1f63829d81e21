/**
 * Tenants cannot hurt each other (docs/api.md §12): concurrency is bounded per
 * owner and per target, so one owner's hanging endpoints do not delay another
 * owner's deliveries. Real receivers on 127.0.0.1; the attempt timeout is
 * stretched past the test's length so that hanging attempts hold their senders throughout.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { signUp, startInstance, type SignedUp } from '../helpers/factories.js';
import { startReceiver, type Receiver } from '../helpers/receivers.js';

let db: TestDatabase;
let app: FastifyInstance;
let hanging: Receiver;
let healthy: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startInstance(
    db,
    { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE: 'true' },
    // No hanging attempt ends before the test does (closing the app cuts them): no sender is ever freed.
    { webhooks: { pollMs: 25, retryBaseMs: 100, timeoutMs: 600_000 } },
  );
  hanging = await startReceiver(() => 'hang');
  healthy = await startReceiver(() => 204);
});
afterAll(async () => {
  await app.close();
  await hanging.close();
  await healthy.close();
  await db.drop();
});

async function webhook(who: SignedUp, url: string): Promise<void> {
  const res = await app.inject({
    method: 'POST',
    url: '/webhooks',
    headers: who.auth,
    payload: { url, types: ['post.created'] },
  });
  expect(res.statusCode, res.body).toBe(201);
}

async function post(who: SignedUp, title: string): Promise<void> {
  const res = await app.inject({ method: 'POST', url: '/posts', headers: who.auth, payload: { title, body: 'b' } });
  expect(res.statusCode, res.body).toBe(201);
}

it("three webhooks of one owner at a hanging endpoint do not delay another owner's deliveries", async () => {
  const ann = await signUp(app);
  const bob = await signUp(app);
  for (let i = 0; i < 3; i++) await webhook(ann, hanging.url);
  // Ann's endpoint holds every sender it is allowed to before Bob's webhook exists.
  for (let i = 0; i < 10; i++) await post(ann, `ann ${i}`);
  await hanging.waitFor(4);
  await webhook(bob, healthy.url);
  // Before the bound, Ann's hanging attempts held every sender, and Bob's deliveries never went out.
  for (let i = 0; i < 10; i++) {
    await post(bob, `bob ${i}`);
    await healthy.waitFor(i + 1, 30_000);
  }
  // Ann holds at most 4 attempts at once, whatever her backlog.
  const { rows } = await app.db.query(
    `SELECT count(*)::int AS n FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
     WHERE w.user_id = $1 AND d.lease_until > now()`,
    [ann.user.id],
  );
  expect(rows[0].n).toBe(4);
  expect(hanging.received.length).toBeLessThanOrEqual(4);
}, 120_000);
