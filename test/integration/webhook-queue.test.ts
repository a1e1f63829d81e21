/**
 * The delivery queue's guarantees, driven directly (no worker runs here):
 * concurrent claims never take one attempt twice, a lease that ran out is
 * claimed again as the next attempt, only the holder of an attempt records
 * it, and fan-out writes one delivery per matching event once.
 */
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import pg from 'pg';
import { webhookQueue } from '../../src/events/webhooks/queue.js';
import { signUp, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';

let t: TestApp;
let ann: SignedUp;
let others: SignedUp[];
let sql: pg.Client;
let queue: ReturnType<typeof webhookQueue>;

beforeAll(async () => {
  t = await startTestApp({ WEBHOOK_CONCURRENCY: '0', WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE: 'true' });
  ann = await signUp(t.app);
  others = [await signUp(t.app), await signUp(t.app), await signUp(t.app), await signUp(t.app)];
  // Numbered now: a webhook starts after the newest numbered event.
  await t.app.events.sequencer.run();
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  queue = webhookQueue(t.app.db);
});
afterAll(async () => {
  await sql.end();
  await t.close();
});
beforeEach(async () => {
  await sql.query('DELETE FROM webhooks');
});

/** Webhooks of `who` (nothing listens: no worker sends here), at one origin or, with `spread`, each at its own. */
async function webhooks(count: number, types?: string[], { who = ann, spread = false } = {}): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < count; i++) {
    const res = await t.app.inject({
      method: 'POST',
      url: '/webhooks',
      headers: who.auth,
      payload: { url: `http://127.0.0.1:${spread ? 40000 + ids.length : 1024}/${i}`, types },
    });
    ids.push(res.json().id);
  }
  return ids;
}

const outcome = { ok: false, statusCode: 500, error: 'answered 500', durationMs: 1, nextAttemptAt: new Date() };

it('concurrent claims share the due deliveries and never take one twice', async () => {
  const ids: number[] = [];
  for (const who of [ann, ...others]) ids.push(...(await webhooks(4, undefined, { who, spread: true })));
  await sql.query(
    `INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) SELECT w, e, now() FROM unnest($1::bigint[]) w, generate_series(1, 3) e`,
    [ids],
  );
  const claims = await Promise.all(Array.from({ length: 8 }, () => queue.claim(10, 60_000)));
  const claimed = claims.flat().map((c) => c.id);
  expect(new Set(claimed).size).toBe(claimed.length);
  expect(claimed.length).toBeGreaterThan(10);
  const { rows } = await sql.query(
    'SELECT count(*)::int AS n FROM webhook_deliveries WHERE lease_until > now() AND attempt = 1',
  );
  expect(rows[0].n).toBe(claimed.length);
});

it('caps the attempts in flight per owner, whatever their origins, and per origin, whoever owns them', async () => {
  const due = (ids: number[]) =>
    sql.query(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) SELECT w, e, now() FROM unnest($1::bigint[]) w, generate_series(1, 10) e`,
      [ids],
    );
  await due(await webhooks(3, undefined, { spread: true }));
  expect(await queue.claim(10, 60_000)).toHaveLength(4);
  expect(await queue.claim(10, 60_000)).toHaveLength(0);
  await sql.query('DELETE FROM webhooks');
  await due([
    ...(await webhooks(1, undefined, { who: others[0] })),
    ...(await webhooks(1, undefined, { who: others[1] })),
  ]);
  expect(await queue.claim(10, 60_000)).toHaveLength(4);
  expect(await queue.claim(10, 60_000)).toHaveLength(0);
});

it('counts attempts already in flight against the cap, and a deep backlog does not crowd other owners out', async () => {
  const [busy] = await webhooks(1);
  const [quiet] = await webhooks(1, undefined, { who: others[0], spread: true });
  await sql.query(
    `INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, lease_until)
     SELECT $1, e, now() - interval '1 hour', CASE WHEN e <= 2 THEN now() + interval '1 minute' END FROM generate_series(1, 40) e`,
    [busy],
  );
  await sql.query(`INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) VALUES ($1, 1, now())`, [
    quiet,
  ]);
  const claimed = await queue.claim(10, 60_000);
  expect(claimed.filter((c) => c.webhookId === busy)).toHaveLength(2);
  expect(claimed.filter((c) => c.webhookId === quiet)).toHaveLength(1);
});

it('claims again, as the next attempt, a delivery whose lease ran out; the old holder records nothing', async () => {
  const [id] = await webhooks(1);
  await sql.query(`INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) VALUES ($1, 1, now())`, [id]);
  const [first] = await queue.claim(1, 60_000);
  expect(first).toMatchObject({ attempt: 1, event: { id: 1, type: 'user.created' } });
  expect(await queue.claim(1, 60_000)).toHaveLength(0);
  // The lease runs out (set back in the database: a short lease and a sleep raced a loaded machine).
  await sql.query(`UPDATE webhook_deliveries SET lease_until = now() - interval '1 second' WHERE id = $1`, [first!.id]);
  const [second] = await queue.claim(1, 60_000);
  expect(second).toMatchObject({ id: first!.id, attempt: 2 });
  expect(await queue.record(first!, outcome, 86_400)).toBe(false);
  expect(await queue.record(second!, outcome, 86_400)).toBe(true);
  const { rows } = await sql.query('SELECT attempt, status, lease_until FROM webhook_deliveries WHERE id = $1', [
    first!.id,
  ]);
  expect(rows[0]).toEqual({ attempt: 2, status: 'failed', lease_until: null });
});

it('fans out each matching event once, moving the cursor past the others', async () => {
  const [all, posts] = [...(await webhooks(1)), ...(await webhooks(1, ['post.created']))];
  await t.app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title: 't', body: 'b' } });
  await signUp(t.app);
  await t.app.events.sequencer.run();
  const [fanned, again] = [await queue.fanOut(), await queue.fanOut()];
  expect([fanned, again]).toEqual([2, 0]);
  const { rows } = await sql.query(
    `SELECT d.webhook_id AS w, e.type FROM webhook_deliveries d JOIN events e ON e.id = d.event_id ORDER BY d.webhook_id, e.id`,
  );
  expect(rows).toEqual([
    { w: String(all), type: 'post.created' },
    { w: String(all), type: 'user.created' },
    { w: String(posts), type: 'post.created' },
  ]);
  const cursors = await sql.query('SELECT DISTINCT cursor = (SELECT max(id) FROM events) AS caught_up FROM webhooks');
  expect(cursors.rows).toEqual([{ caught_up: true }]);
});

it('gives up a failed attempt that ends after its webhook was disabled', async () => {
  const [id] = await webhooks(1);
  await sql.query(`INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) VALUES ($1, 1, now())`, [id]);
  const [claimed] = await queue.claim(1, 60_000);
  await t.app.inject({ method: 'PATCH', url: `/webhooks/${id}`, headers: ann.auth, payload: { status: 'disabled' } });
  expect(await queue.record(claimed!, outcome, 86_400)).toBe(true);
  const { rows } = await sql.query('SELECT status, next_attempt_at FROM webhook_deliveries WHERE id = $1', [
    claimed!.id,
  ]);
  expect(rows[0]).toEqual({ status: 'given_up', next_attempt_at: null });
});
