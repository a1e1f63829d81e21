/**
 * Managing webhooks (docs/api.md §12): create (the secret shown once), list,
 * read, change, delete, deliveries and retry; owner and admin authorization;
 * the URL rules at creation (https only, no private literal address).
 * Deliveries themselves are webhook-delivery.test.ts's subject: this app sends none.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { makeAdmin, signUp, startInstance, startTestApp, type SignedUp, type TestApp } from '../helpers/factories.js';
import { expectError } from '../helpers/expect.js';
import { expectContractResponse } from '../helpers/contract.js';

let t: TestApp;
let ann: SignedUp;
let bob: SignedUp;
let admin: SignedUp;
let sql: pg.Client;

beforeAll(async () => {
  t = await startTestApp({ WEBHOOK_CONCURRENCY: '0' });
  [ann, bob, admin] = await Promise.all([signUp(t.app), signUp(t.app), signUp(t.app)]);
  await makeAdmin(t.app, admin.user.email);
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
afterAll(async () => {
  await sql.end();
  await t.close();
});

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

async function create(by: SignedUp, payload: object = { url: 'https://hooks.example.com/in' }) {
  const res = await t.app.inject({ method: 'POST', url: '/webhooks', headers: by.auth, payload });
  expect(res.statusCode, res.body).toBe(201);
  return res;
}

/** What a url that is not an RFC 3986 URI gets, refused by the schema's format: uri. */
const NOT_A_URI =
  'must be an absolute URL as RFC 3986 writes it (spaces, non-ASCII and other characters it does not allow percent-encoded)';

describe('url: an RFC 3986 URI, in the document and in validation', () => {
  it('is format uri wherever the document shows a webhook url', async () => {
    type Schema = { properties: Record<string, object> };
    const doc = (await t.app.inject({ url: '/openapi.json' })).json();
    const body = (operation: { requestBody: { content: Record<string, { schema: Schema }> } }) =>
      Object.values(operation.requestBody.content).map((media) => media.schema.properties.url);
    const urls = [
      ...body(doc.paths['/webhooks'].post),
      ...body(doc.paths['/webhooks/{webhookId}'].patch),
      doc.components.schemas.Webhook.properties.url,
    ];
    expect(urls).toHaveLength(4);
    for (const url of urls) expect(url).toMatchObject({ type: 'string', format: 'uri', maxLength: 2000 });
  });

  it('takes https URLs with ports, paths, queries, percent-encoding, IPv4 and IPv6 literals', async () => {
    for (const [url, stored] of [
      ['https://hooks.example.com:8443/posts-api', 'https://hooks.example.com:8443/posts-api'],
      ['https://hooks.example.com/a/b/c?x=1&y=a%20b', 'https://hooks.example.com/a/b/c?x=1&y=a%20b'],
      [
        "https://hooks.example.com/~me/in;v=1?l=a,b&q=x:y@z&s=!$'()*+",
        'https://hooks.example.com/~me/in;v=1?l=a,b&q=x:y@z&s=!$%27()*+',
      ],
      ['https://[2606:4700::1111]:8443/in', 'https://[2606:4700::1111]:8443/in'],
      ['https://93.184.216.34/in?token=abc', 'https://93.184.216.34/in?token=abc'],
      ['https://b%C3%BCcher.example/in', 'https://xn--bcher-kva.example/in'],
      ['https://a.example.com/caf%C3%A9?', 'https://a.example.com/caf%C3%A9?'],
    ]) {
      const res = await t.app.inject({ method: 'POST', url: '/webhooks', headers: bob.auth, payload: { url } });
      expect(res.statusCode, `${url}: ${res.body}`).toBe(201);
      expect(res.json().url, url).toBe(stored);
      await t.app.inject({ method: 'DELETE', url: `/webhooks/${res.json().id}`, headers: bob.auth });
    }
  });

  it('refuses what is no URI with the uniform 422 on fieldErrors.url, on POST and PATCH', async () => {
    const { id } = (await create(ann)).json();
    for (const url of [
      'not a url',
      '',
      'https://hooks.example.com/a\r\nb',
      'https://hooks.example.com/a b',
      'https://bücher.example/',
      'https://hooks.example.com/a|b',
      'https://hooks.example.com/?x={y}',
      'https://hooks.example.com/%zz',
    ]) {
      for (const [method, path] of [
        ['POST', '/webhooks'],
        ['PATCH', `/webhooks/${id}`],
      ] as const) {
        const res = await t.app.inject({ method, url: path, headers: ann.auth, payload: { url } });
        expect(res.json(), `${method} ${JSON.stringify(url)}`).toEqual({
          error: 'validation',
          message: 'request is invalid',
          fieldErrors: { url: [NOT_A_URI] },
          requestId: res.headers['x-request-id'],
        });
        expect(res.statusCode).toBe(422);
      }
    }
  });
});

describe('POST /webhooks', () => {
  it('answers 201 with the webhook, its Location and its secret, which no later answer shows', async () => {
    const res = await create(ann, {
      url: 'https://hooks.example.com/in',
      types: ['post.created', 'comment.created'],
      description: 'mine',
    });
    const body = res.json();
    expect(body).toEqual({
      id: expect.any(Number),
      userId: ann.user.id,
      url: 'https://hooks.example.com/in',
      types: ['post.created', 'comment.created'],
      description: 'mine',
      status: 'active',
      failingSince: null,
      createdAt: expect.stringMatching(TIMESTAMP),
      updatedAt: expect.stringMatching(TIMESTAMP),
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{32}$/),
    });
    expect(Buffer.from(body.secret.slice(6), 'base64')).toHaveLength(24);
    expect(res.headers.location).toBe(`/webhooks/${body.id}`);
    expect(res.headers['cache-control']).toBe('private, no-store');

    const { secret: _secret, ...shown } = body;
    const read = await t.app.inject({ url: `/webhooks/${body.id}`, headers: ann.auth });
    expect(read.json()).toEqual(shown);
    const list = await t.app.inject({ url: '/webhooks', headers: ann.auth });
    expect(list.body).not.toContain(body.secret.slice(6));
    expect(read.body).not.toContain('secret');
  });

  it('stores the URL normalized; refuses a malformed one, port 0, an IPv4-compatible loopback literal', async () => {
    const res = await create(ann, { url: 'HTTPS://Hooks.Example.COM:443/a/../in?x=1' });
    expect(res.json().url).toBe('https://hooks.example.com/in?x=1');
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/${res.json().id}`,
      headers: ann.auth,
      payload: { url: 'https://HOOKS.example.com:8443/b' },
    });
    expect(patched.json().url).toBe('https://hooks.example.com:8443/b');
    for (const [url, problem] of [
      ['https:///x', 'must be a well-formed absolute URL'],
      ['https://hooks.example.com:0/', 'must not use port 0'],
      ['https://[::127.0.0.1]/', 'must not name a loopback address'],
    ]) {
      const refused = await t.app.inject({ method: 'POST', url: '/webhooks', headers: ann.auth, payload: { url } });
      expect(refused.statusCode, url).toBe(422);
      expect(refused.json()).toEqual({
        error: 'validation',
        message: 'the webhook URL is not allowed',
        fieldErrors: { url: [problem] },
        requestId: refused.headers['x-request-id'],
      });
    }
  });

  it('gives each webhook its own secret', async () => {
    const [a, b] = await Promise.all([create(ann), create(ann)]);
    expect(a.json().secret).not.toBe(b.json().secret);
  });

  it('defaults to every type and no description', async () => {
    expect((await create(ann)).json()).toMatchObject({ types: null, description: null });
  });

  it.each([
    [{ url: 'http://hooks.example.com/in' }, 'url', 'must be an https URL'],
    [{ url: 'https://127.0.0.1/in' }, 'url', 'must not name a loopback address'],
    [{ url: 'https://[::1]:8443/in' }, 'url', 'must not name a loopback address'],
    [{ url: 'https://10.1.2.3/in' }, 'url', 'must not name a private address'],
    [{ url: 'https://169.254.169.254/latest' }, 'url', 'must not name a linkLocal address'],
    [
      { url: 'https://user:pw@hooks.example.com/' },
      'url',
      'must not hold a user name or password (deliveries are signed instead)',
    ],
    [{ url: 'not a url' }, 'url', NOT_A_URI],
  ])('refuses %j with a 422', async (payload, field, message) => {
    const res = await t.app.inject({ method: 'POST', url: '/webhooks', headers: ann.auth, payload });
    expect(res.statusCode).toBe(422);
    expect(expectContractResponse(res)?.fieldErrors).toEqual({ [field]: [message] });
  });

  it('refuses unknown event types and empty type lists', async () => {
    for (const types of [['post.exploded'], []]) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: ann.auth,
        payload: { url: 'https://a.example.com', types },
      });
      expect(res.statusCode, res.body).toBe(422);
      expect(Object.keys(res.json().fieldErrors)[0]).toMatch(/^types/);
    }
  });

  it('needs a token', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/webhooks', payload: { url: 'https://a.example.com' } });
    expect(res.statusCode).toBe(401);
  });

  it('stores the secret as raw bytes', async () => {
    const body = (await create(ann)).json();
    const { rows } = await sql.query('SELECT secret FROM webhooks WHERE id = $1', [body.id]);
    expect(rows[0]).toEqual({ secret: Buffer.from(body.secret.slice(6), 'base64') });
  });
});

describe('who may see and change a webhook', () => {
  it("lists only your own webhooks; an admin sees everyone's", async () => {
    const bobs = (await create(bob)).json();
    const mine = await t.app.inject({ url: '/webhooks?limit=100', headers: bob.auth });
    expect(mine.json().data.map((w: { userId: number }) => w.userId)).toEqual([bob.user.id]);
    const all = await t.app.inject({ url: '/webhooks?perPage=100', headers: admin.auth });
    const owners = new Set(all.json().data.map((w: { userId: number }) => w.userId));
    expect(owners).toEqual(new Set([ann.user.id, bob.user.id]));
    expect(all.json().total).toBeGreaterThan(1);
    expect(all.json().data.map((w: { id: number }) => w.id)).toContain(bobs.id);
  });

  it.each([
    ['GET', ''],
    ['PATCH', ''],
    ['DELETE', ''],
    ['GET', '/deliveries'],
  ])('%s /webhooks/{id}%s: 403 for another user, 404 when missing, 401 without a token', async (method, suffix) => {
    const id = (await create(ann)).json().id;
    const payload = method === 'PATCH' ? { description: 'x' } : undefined;
    const as = (headers: Record<string, string>, webhookId = id) =>
      t.app.inject({
        method: method as 'GET',
        url: `/webhooks/${webhookId}${suffix}`,
        headers,
        ...(payload && { payload }),
      });
    const denied = await as(bob.auth);
    expect(denied.statusCode).toBe(403);
    expect(expectContractResponse(denied)?.message).toBe('only its owner or an admin may see or change this webhook');
    expect((await as(bob.auth, 99_999_999)).statusCode).toBe(404);
    expect((await as({})).statusCode).toBe(401);
    expect((await as(admin.auth)).statusCode).toBe(method === 'DELETE' ? 204 : 200);
  });
});

describe('PATCH and DELETE /webhooks/{id}', () => {
  it('changes only the given fields; null clears types and description', async () => {
    const created = (
      await create(ann, { url: 'https://a.example.com', types: ['post.created'], description: 'd' })
    ).json();
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/${created.id}`,
      headers: ann.auth,
      payload: { types: null, description: null, url: 'https://b.example.com/x' },
    });
    expect(res.statusCode).toBe(200);
    const { secret: _s, ...before } = created;
    expect(res.json()).toEqual({
      ...before,
      url: 'https://b.example.com/x',
      types: null,
      description: null,
      updatedAt: expect.stringMatching(TIMESTAMP),
    });
  });

  it('refuses an empty change and a URL it would refuse at creation', async () => {
    const id = (await create(ann)).json().id;
    for (const payload of [{}, { url: 'http://a.example.com' }, { status: 'paused' }]) {
      const res = await t.app.inject({ method: 'PATCH', url: `/webhooks/${id}`, headers: ann.auth, payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(422);
    }
  });

  it('disables and re-enables: disabling gives up what was still to send, re-enabling starts after the newest event', async () => {
    const id = (await create(ann)).json().id;
    await sql.query(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at) VALUES ($1, 1, now()), ($1, 2, NULL)`,
      [id],
    );
    await sql.query(`UPDATE webhooks SET failing_since = now() - interval '1 hour' WHERE id = $1`, [id]);
    const off = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/${id}`,
      headers: ann.auth,
      payload: { status: 'disabled' },
    });
    expect(off.json()).toMatchObject({ status: 'disabled', failingSince: expect.stringMatching(TIMESTAMP) });
    const deliveries = await t.app.inject({ url: `/webhooks/${id}/deliveries`, headers: ann.auth });
    expect(deliveries.json().data.map((d: { status: string }) => d.status)).toEqual(['pending', 'given_up']);

    await signUp(t.app);
    await t.app.events.sequencer.run();
    const on = await t.app.inject({
      method: 'PATCH',
      url: `/webhooks/${id}`,
      headers: ann.auth,
      payload: { status: 'active' },
    });
    expect(on.json()).toMatchObject({ status: 'active', failingSince: null });
    const { rows } = await sql.query(
      'SELECT cursor = (SELECT max(id) FROM events) AS caught_up FROM webhooks WHERE id = $1',
      [id],
    );
    expect(rows[0].caught_up).toBe(true);
  });

  it('deletes a webhook with its deliveries', async () => {
    const id = (await create(ann)).json().id;
    await sql.query('INSERT INTO webhook_deliveries (webhook_id, event_id) VALUES ($1, 1)', [id]);
    const res = await t.app.inject({ method: 'DELETE', url: `/webhooks/${id}`, headers: ann.auth });
    expect(res.statusCode).toBe(204);
    expect((await t.app.inject({ url: `/webhooks/${id}`, headers: ann.auth })).statusCode).toBe(404);
    expect(
      (await sql.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1', [id])).rows[0].n,
    ).toBe(0);
  });
});

describe('deliveries', () => {
  it('lists them newest first, by cursor, and retries one: due now, pending', async () => {
    const id = (await create(ann)).json().id;
    await sql.query(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, attempt, status, status_code, error, duration_ms, next_attempt_at)
       SELECT $1, e, 3, 'given_up', 500, 'answered 500', 12, NULL FROM generate_series(1, 3) e`,
      [id],
    );
    const first = await t.app.inject({ url: `/webhooks/${id}/deliveries?limit=2`, headers: ann.auth });
    expect(first.statusCode).toBe(200);
    const page = first.json();
    expect(page).toMatchObject({ limit: 2, hasMore: true, prevCursor: null });
    expect(page.data.map((d: { eventId: number }) => d.eventId)).toEqual([3, 2]);
    expect(page.data[0]).toEqual({
      id: expect.any(Number),
      webhookId: id,
      eventId: 3,
      attempt: 3,
      status: 'given_up',
      statusCode: 500,
      error: 'answered 500',
      durationMs: 12,
      nextAttemptAt: null,
      createdAt: expect.stringMatching(TIMESTAMP),
      updatedAt: expect.stringMatching(TIMESTAMP),
    });
    expect(first.headers.link).toBe(`</webhooks/${id}/deliveries?limit=2&after=${page.nextCursor}>; rel="next"`);
    const second = await t.app.inject({
      url: `/webhooks/${id}/deliveries?limit=2&after=${page.nextCursor}`,
      headers: ann.auth,
    });
    expect(second.json().data.map((d: { eventId: number }) => d.eventId)).toEqual([1]);

    const deliveryId = page.data[0].id;
    const retried = await t.app.inject({
      method: 'POST',
      url: `/webhooks/${id}/deliveries/${deliveryId}/retry`,
      headers: ann.auth,
    });
    expect(retried.statusCode).toBe(202);
    expect(retried.json()).toMatchObject({
      id: deliveryId,
      status: 'pending',
      attempt: 3,
      nextAttemptAt: expect.stringMatching(TIMESTAMP),
    });
  });

  it('retry: 404 for a delivery of another webhook, 409 while in flight or while the webhook is disabled', async () => {
    const id = (await create(ann)).json().id;
    const otherId = (await create(ann)).json().id;
    const { rows } = await sql.query(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, lease_until) VALUES ($1, 1, now() + interval '1 minute') RETURNING id`,
      [id],
    );
    const deliveryId = rows[0].id;
    const retry = (webhookId: number) =>
      t.app.inject({ method: 'POST', url: `/webhooks/${webhookId}/deliveries/${deliveryId}/retry`, headers: ann.auth });
    expect((await retry(otherId)).statusCode).toBe(404);
    const busy = await retry(id);
    expect(busy.statusCode).toBe(409);
    expect(expectContractResponse(busy)?.message).toBe(`delivery ${deliveryId} is being sent now`);
    await t.app.inject({ method: 'PATCH', url: `/webhooks/${id}`, headers: ann.auth, payload: { status: 'disabled' } });
    expect((await retry(id)).statusCode).toBe(409);
  });
});

it('a user has at most WEBHOOK_MAX_PER_USER webhooks: 10 created at once against 3 make 3, the rest a 409', async () => {
  const capped = await startInstance(t.db, { WEBHOOK_CONCURRENCY: '0', WEBHOOK_MAX_PER_USER: '3' });
  try {
    const cy = await signUp(capped);
    const tries = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        capped.inject({
          method: 'POST',
          url: '/webhooks',
          headers: cy.auth,
          payload: { url: `https://hooks.example.com/${i}` },
        }),
      ),
    );
    expect(tries.filter((res) => res.statusCode === 201)).toHaveLength(3);
    const refused = tries.filter((res) => res.statusCode !== 201);
    expect(refused).toHaveLength(7);
    for (const res of refused)
      expectError(
        res,
        409,
        'conflict',
        'you have 3 webhooks, the most a user may have (WEBHOOK_MAX_PER_USER): delete one first',
      );
    // Another user is not held back by this one; a deletion makes room.
    const dee = await signUp(capped);
    const own = { method: 'POST' as const, url: '/webhooks', payload: { url: 'https://hooks.example.com/d' } };
    expect((await capped.inject({ ...own, headers: dee.auth })).statusCode).toBe(201);
    const first = tries.find((res) => res.statusCode === 201)!.json().id;
    await capped.inject({ method: 'DELETE', url: `/webhooks/${first}`, headers: cy.auth });
    expect((await capped.inject({ ...own, headers: cy.auth })).statusCode).toBe(201);
  } finally {
    await capped.close();
  }
});
