/**
 * The checked-token cache (src/plugins/auth.ts): an instance trusts a token it
 * has checked for 1 s (authCacheMs; shorter here), never past the token's expiry; revoking a token
 * through the service is seen at once by the instance that did it, and by every
 * other instance within the bound; authCacheMs 0 asks the database every time.
 * A token whose user an operator deleted while it was trusted: its writes are a
 * 404 (a foreign key to the user), never a 500; `/users/me` is a 401, not a 404,
 * and the token is trusted no more.
 */
import { onTopology } from '../helpers/database.js';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { signUp, testConfig, useTestApp } from '../helpers/factories.js';

const BOUND_MS = 300;
const t = useTestApp({}, { authCacheMs: BOUND_MS });
let other: FastifyInstance;

beforeAll(async () => {
  const config = testConfig();
  other = (await buildApp({ ...config, ...onTopology(t.db.url), authCacheMs: BOUND_MS })) as unknown as FastifyInstance;
  await other.ready();
});
afterAll(() => other.close());

async function sql(text: string, values: unknown[] = []): Promise<void> {
  const client = new pg.Client({ connectionString: t.db.url });
  await client.connect();
  try {
    await client.query(text, values);
  } finally {
    await client.end();
  }
}
/**
 * Whether less than `ms` has passed since `since` (performance.now()): only then
 * must an answer still be the one before a deadline; a loaded machine may be past it.
 */
const within = (since: number, ms: number) => performance.now() - since < ms;
const me = (app: FastifyInstance, auth: Record<string, string>) => app.inject({ url: '/users/me', headers: auth });
async function sqlCount(text: string, values: unknown[]): Promise<number> {
  const client = new pg.Client({ connectionString: t.db.url });
  await client.connect();
  try {
    return (await client.query<{ n: number }>(text, values)).rows[0]!.n;
  } finally {
    await client.end();
  }
}

describe('checked tokens', () => {
  it('are trusted for the bound: a revocation behind the service’s back shows only after it', async () => {
    const ann = await signUp(t.app);
    const checked = performance.now();
    expect((await me(t.app, ann.auth)).statusCode).toBe(200);
    await sql('UPDATE tokens SET revoked_at = now() WHERE id = $1', [ann.tokenId]);
    const trusted = await me(t.app, ann.auth);
    if (within(checked, BOUND_MS)) expect(trusted.statusCode).toBe(200); // no query
    await sleep(BOUND_MS + 50);
    const res = await me(t.app, ann.auth);
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
  });

  it('revoked through the service: refused at once here, within the bound on another instance', async () => {
    const bob = await signUp(t.app);
    expect((await me(t.app, bob.auth)).statusCode).toBe(200);
    expect((await me(other, bob.auth)).statusCode).toBe(200);
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/tokens/${bob.tokenId}`, headers: bob.auth })).statusCode,
    ).toBe(204);
    expect((await me(t.app, bob.auth)).statusCode).toBe(401);
    await sleep(BOUND_MS + 50);
    expect((await me(other, bob.auth)).statusCode).toBe(401);
  });

  it('a password change ends the other sessions at once on this instance, keeps the one that made it', async () => {
    const cy = await signUp(t.app);
    const login = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: cy.user.email, password: cy.password },
    });
    const second = { authorization: `Bearer ${login.json().token as string}` };
    expect((await me(t.app, second)).statusCode).toBe(200);
    const change = await t.app.inject({
      method: 'PATCH',
      url: `/users/${cy.user.id}`,
      headers: cy.auth,
      payload: { password: 'another-password-1' },
    });
    expect(change.statusCode).toBe(200);
    expect((await me(t.app, second)).statusCode).toBe(401);
    expect((await me(t.app, cy.auth)).statusCode).toBe(200);
  });

  it('never past the token’s own expiry', async () => {
    const dee = await signUp(t.app);
    const expiring = performance.now();
    await sql("UPDATE tokens SET expires_at = now() + interval '150 milliseconds' WHERE id = $1", [dee.tokenId]);
    const before = await me(t.app, dee.auth);
    if (within(expiring, 150)) expect(before.statusCode).toBe(200);
    await sleep(200);
    expect((await me(t.app, dee.auth)).statusCode).toBe(401);
  });

  it('authCacheMs 0: every request asks the database', async () => {
    const config = testConfig();
    const uncached = (await buildApp({
      ...config,
      ...onTopology(t.db.url),
      authCacheMs: 0,
    })) as unknown as FastifyInstance;
    try {
      const eve = await signUp(t.app);
      expect((await me(uncached, eve.auth)).statusCode).toBe(200);
      await sql('UPDATE tokens SET revoked_at = now() WHERE id = $1', [eve.tokenId]);
      expect((await me(uncached, eve.auth)).statusCode).toBe(401);
    } finally {
      await uncached.close();
    }
  });

  describe("whose user is deleted behind the service's back (an operator's SQL) while the token is trusted", () => {
    let trusting: FastifyInstance;
    beforeAll(async () => {
      const config = testConfig();
      trusting = (await buildApp({
        ...config,
        ...onTopology(t.db.url),
        authCacheMs: 60_000,
      })) as unknown as FastifyInstance;
    });
    afterAll(() => trusting.close());

    /** A user whose token `trusting` has checked (and so trusts), then deleted in SQL. */
    async function deletedUser() {
      const gone = await signUp(t.app);
      expect((await trusting.inject({ url: '/posts', headers: gone.auth })).statusCode).toBe(200);
      await sql('DELETE FROM users WHERE id = $1', [gone.user.id]);
      return gone;
    }
    /** A write the foreign key to its user refused. */
    function expectMissingReference(res: Awaited<ReturnType<FastifyInstance['inject']>>) {
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({
        error: 'not_found',
        message: 'a resource this request refers to does not exist',
        requestId: res.headers['x-request-id'],
      });
    }
    function expectInvalidToken(res: Awaited<ReturnType<FastifyInstance['inject']>>) {
      expect(res.statusCode).toBe(401);
      expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
      expect(res.json()).toEqual({
        error: 'unauthorized',
        message: 'the access token is malformed, unknown, expired or revoked',
        requestId: res.headers['x-request-id'],
      });
    }

    it('POST /posts (a foreign key to the author) is a 404, and nothing is written', async () => {
      const gone = await deletedUser();
      expectMissingReference(
        await trusting.inject({
          method: 'POST',
          url: '/posts',
          headers: gone.auth,
          payload: { title: 'T', body: 'B' },
        }),
      );
      expect(await sqlCount('SELECT count(*)::int AS n FROM posts WHERE author_id = $1', [gone.user.id])).toBe(0);
    });

    it('a comment is a 404', async () => {
      const ann = await signUp(t.app);
      const post = await t.app.inject({
        method: 'POST',
        url: '/posts',
        headers: ann.auth,
        payload: { title: 'T', body: 'B' },
      });
      const gone = await deletedUser();
      const res = await trusting.inject({
        method: 'POST',
        url: `/posts/${post.json().id as number}/comments`,
        headers: gone.auth,
        payload: { body: 'c' },
      });
      expectMissingReference(res);
    });

    it('a webhook (its owner a foreign key to users, like every user reference) is a 404', async () => {
      const gone = await deletedUser();
      const res = await trusting.inject({
        method: 'POST',
        url: '/webhooks',
        headers: gone.auth,
        payload: { url: 'https://hooks.example.com/in' },
      });
      expectMissingReference(res);
    });

    it('GET /users/me is a 401, not a 404, and the token is trusted no more', async () => {
      const gone = await deletedUser();
      expectInvalidToken(await me(trusting, gone.auth));
      expectInvalidToken(await trusting.inject({ url: '/posts', headers: gone.auth }));
    });
  });
});
