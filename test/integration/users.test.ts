/** The users and tokens flow: sign-up, log-in, me, profiles, changes, token listing and revocation. */
import { describe, expect, it } from 'vitest';
import { PASSWORD_COST } from '../../src/security.js';
import { signUp, startTestApp, useTestApp } from '../helpers/factories.js';
import { expectError, iso, offsetLinks } from '../helpers/expect.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann', email: 'Ann@Example.com', password: 'ann-secret-1' });
const bob = t.user({ name: 'Bob' });
const admin = t.admin({ name: 'Root' });

describe('POST /users', () => {
  it('creates a user: 201, Location, no password in the body', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'Cleo', email: 'cleo@example.com', password: 'cleo-secret', id: 999, createdAt: 'x' },
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toEqual({
      id: expect.any(Number),
      name: 'Cleo',
      role: 'user',
      email: 'cleo@example.com',
      createdAt: iso,
    });
    expect(body.id).not.toBe(999);
    expect(res.headers.location).toBe(`/users/${body.id}`);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    const row = await t.app.db.query('SELECT password_hash FROM users WHERE id = $1', [body.id]);
    // The cost the tests set (test/helpers/cheap-passwords.ts); the production one is a unit test's.
    const { N, r, p } = PASSWORD_COST;
    expect(row.rows[0].password_hash).toMatch(new RegExp(`^scrypt\\$${N}\\$${r}\\$${p}\\$`));
    expect(row.rows[0].password_hash).not.toContain('cleo-secret');
  });

  it('409 with fieldErrors.email when the e-mail is taken, case-insensitively', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'Ann again', email: 'ANN@example.COM', password: 'whatever-1' },
    });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual({
      error: 'conflict',
      message: 'email is already registered',
      fieldErrors: { email: ['is already registered'] },
      requestId: res.headers['x-request-id'],
    });
  });

  it('parallel sign-ups with one e-mail: exactly one wins', async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        t.app.inject({
          method: 'POST',
          url: '/users',
          payload: { name: `Racer ${i}`, email: 'race@example.com', password: 'racing-1234' },
        }),
      ),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
  });

  it('422 lists every field problem at once', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: '   ', email: 'not-an-email', password: 'short', role: 'admin' },
    });
    expect(res.statusCode).toBe(422);
    expect(res.json()).toEqual({
      error: 'validation',
      message: 'request is invalid',
      fieldErrors: {
        name: ['must not be blank'],
        email: ['must be a valid e-mail address'],
        password: ['must be at least 8 characters'],
        role: ['is not allowed'],
      },
      requestId: res.headers['x-request-id'],
    });
  });

  it('422 for missing fields and over-long values', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'x'.repeat(101), password: 'p'.repeat(201) },
    });
    expect(res.statusCode).toBe(422);
    expect(res.json().fieldErrors).toEqual({
      name: ['must be at most 100 characters'],
      email: ['is required'],
      password: ['must be at most 200 characters'],
    });
  });
});

describe('POST /tokens', () => {
  it('issues an opaque bearer token with expiry and the user', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: 'ann@EXAMPLE.com', password: 'ann-secret-1' },
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toEqual({
      id: expect.any(Number),
      token: expect.stringMatching(/^pat_[A-Za-z0-9_-]{43}$/),
      tokenType: 'Bearer',
      expiresAt: iso,
      user: { ...ann.user },
    });
    const ttl = Date.parse(body.expiresAt) - Date.now();
    expect(ttl).toBeGreaterThan(86_300_000);
    expect(ttl).toBeLessThanOrEqual(86_400_000);
    const stored = await t.app.db.query('SELECT token_hash FROM tokens WHERE id = $1', [body.id]);
    expect(Buffer.from(stored.rows[0].token_hash).toString('utf8')).not.toContain(body.token);
  });

  it('answers the same for a wrong password and an unknown e-mail', async () => {
    const wrong = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: ann.user.email, password: 'nope-nope' },
    });
    const unknown = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: 'ghost@example.com', password: 'nope-nope' },
    });
    for (const res of [wrong, unknown]) {
      expect(res.statusCode).toBe(401);
      expect(res.headers['www-authenticate']).toBe('Bearer');
      expect(res.json()).toEqual({
        error: 'unauthorized',
        message: 'e-mail or password is wrong',
        requestId: res.headers['x-request-id'],
      });
    }
  });

  it('422 without credentials', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/tokens', payload: {} });
    expect(res.statusCode).toBe(422);
    expect(res.json().fieldErrors).toEqual({ email: ['is required'], password: ['is required'] });
  });
});

describe('GET /users/me and profiles', () => {
  it('me: own user with e-mail', async () => {
    const res = await t.app.inject({ url: '/users/me', headers: ann.auth });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual(ann.user);
    expect(ann.user.email).toBe('Ann@Example.com');
  });

  it('me without a token: 401 with WWW-Authenticate', async () => {
    const res = await t.app.inject({ url: '/users/me' });
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer');
    expect(res.json().error).toBe('unauthorized');
  });

  it('/users/me answers 405 with Allow: GET, HEAD to every other method, with or without a token (not /users/{userId})', async () => {
    for (const method of ['PATCH', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'TRACE', 'PROPFIND'] as const) {
      for (const headers of [{}, ann.auth]) {
        const res = await t.app.inject({
          method,
          url: '/users/me',
          headers,
          payload: method === 'TRACE' ? undefined : { name: 'Me' },
        });
        expectError(res, 405, 'method_not_allowed', `${method} is not supported on /users/me; use GET, HEAD`);
        expect(res.headers.allow, method).toBe('GET, HEAD');
      }
    }
    expect((await t.app.inject({ url: '/users/me', headers: ann.auth })).json().name).toBe('Ann');
  });

  it('a profile hides the e-mail from others, shows it to the owner and admins', async () => {
    const anonymous = await t.app.inject({ url: `/users/${ann.user.id}` });
    const other = await t.app.inject({ url: `/users/${ann.user.id}`, headers: bob.auth });
    const self = await t.app.inject({ url: `/users/${ann.user.id}`, headers: ann.auth });
    const byAdmin = await t.app.inject({ url: `/users/${ann.user.id}`, headers: admin.auth });
    const { email: _e, ...publicAnn } = ann.user;
    expect(anonymous.json()).toEqual(publicAnn);
    expect(other.json()).toEqual(publicAnn);
    expect(self.json()).toEqual(ann.user);
    expect(byAdmin.json()).toEqual(ann.user);
  });

  it('404 for a missing user and for a non-integer id', async () => {
    for (const url of ['/users/999999', '/users/abc', '/users/0', '/users/-1', '/users/1.5', '/users/01']) {
      const res = await t.app.inject({ url });
      expect(res.statusCode, url).toBe(404);
      expect(res.json().error).toBe('not_found');
    }
  });

  it('lists users with emails only where allowed', async () => {
    const res = await t.app.inject({ url: '/users?sort=name&perPage=2', headers: bob.auth });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.page).toBe(1);
    expect(body.perPage).toBe(2);
    expect(body.total).toBeGreaterThanOrEqual(4);
    expect(body.totalPages).toBe(Math.ceil(body.total / 2));
    expect(body.data.map((u: { name: string }) => u.name)).toEqual(['Ann', 'Bob']);
    expect(body.data[0].email).toBeUndefined();
    expect(body.data[1].email).toBe(bob.user.email);
    expect(offsetLinks(res.headers.link)).toContain('</users?sort=name&perPage=2&page=2>; rel="next"');
  });
});

describe('PATCH /users/{id}', () => {
  it('the user changes their own name; only that changes', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${bob.user.id}`,
      headers: bob.auth,
      payload: { name: 'Bobby' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ...bob.user, name: 'Bobby' });
  });

  it('another user: 403; missing user: 404 first', async () => {
    const other = await t.app.inject({
      method: 'PATCH',
      url: `/users/${ann.user.id}`,
      headers: bob.auth,
      payload: { name: 'Hacked' },
    });
    expect(other.statusCode).toBe(403);
    expect(other.json().error).toBe('forbidden');
    const missing = await t.app.inject({
      method: 'PATCH',
      url: '/users/999999',
      headers: bob.auth,
      payload: { name: 'X' },
    });
    expect(missing.statusCode).toBe(404);
  });

  it('an admin may change anyone', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${ann.user.id}`,
      headers: admin.auth,
      payload: { name: 'Ann B' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().name).toBe('Ann B');
  });

  it('409 on a taken e-mail', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${bob.user.id}`,
      headers: bob.auth,
      payload: { email: 'ANN@example.com' },
    });
    expect(res.statusCode).toBe(409);
    expect(res.json().fieldErrors).toEqual({ email: ['is already registered'] });
  });

  it('a new password works and ends every other session', async () => {
    const dave = await signUp(t.app, { password: 'dave-old-pass' });
    const second = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: dave.user.email, password: 'dave-old-pass' },
    });
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${dave.user.id}`,
      headers: dave.auth,
      payload: { password: 'dave-new-pass' },
    });
    expect(res.statusCode).toBe(200);
    expect((await t.app.inject({ url: '/users/me', headers: dave.auth })).statusCode).toBe(200);
    const other = await t.app.inject({ url: '/users/me', headers: { authorization: `Bearer ${second.json().token}` } });
    expect(other.statusCode).toBe(401);
    const oldLogin = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: dave.user.email, password: 'dave-old-pass' },
    });
    expect(oldLogin.statusCode).toBe(401);
    const newLogin = await t.app.inject({
      method: 'POST',
      url: '/tokens',
      payload: { email: dave.user.email, password: 'dave-new-pass' },
    });
    expect(newLogin.statusCode).toBe(201);
  });

  it('role is not writable: 422', async () => {
    const res = await t.app.inject({
      method: 'PATCH',
      url: `/users/${bob.user.id}`,
      headers: bob.auth,
      payload: { role: 'admin' },
    });
    expect(res.statusCode).toBe(422);
    expect(res.json().fieldErrors).toEqual({ role: ['is not allowed'] });
  });
});

describe('tokens: list and revoke', () => {
  it('lists own live tokens without secrets, revokes one, 404 for another user’s', async () => {
    const eve = await signUp(t.app);
    const list = await t.app.inject({ url: '/tokens', headers: eve.auth });
    expect(list.statusCode).toBe(200);
    expect(list.json()).toEqual({
      data: [{ id: eve.tokenId, createdAt: iso, expiresAt: iso }],
      page: 1,
      perPage: 20,
      total: 1,
      totalPages: 1,
    });
    const foreign = await t.app.inject({ method: 'DELETE', url: `/tokens/${eve.tokenId}`, headers: bob.auth });
    expect(foreign.statusCode).toBe(404);
    const revoked = await t.app.inject({ method: 'DELETE', url: `/tokens/${eve.tokenId}`, headers: eve.auth });
    expect(revoked.statusCode).toBe(204);
    expect(revoked.body).toBe('');
    const after = await t.app.inject({ url: '/users/me', headers: eve.auth });
    expect(after.statusCode).toBe(401);
    expect(after.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
  });

  it('an expired token is rejected', async () => {
    const fay = await signUp(t.app);
    await t.app.db.query("UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1", [fay.tokenId]);
    const res = await t.app.inject({ url: '/users/me', headers: fay.auth });
    expect(res.statusCode).toBe(401);
  });

  it('TOKEN_TTL sets the lifetime', async () => {
    const short = await startTestApp({ TOKEN_TTL: '60' });
    try {
      const u = await signUp(short.app);
      const res = await short.app.inject({
        method: 'POST',
        url: '/tokens',
        payload: { email: u.user.email, password: u.password },
      });
      const ttl = Date.parse(res.json().expiresAt) - Date.now();
      expect(ttl).toBeGreaterThan(55_000);
      expect(ttl).toBeLessThanOrEqual(60_000);
    } finally {
      await short.close();
    }
  });

  it('cursor mode over own tokens', async () => {
    const gus = await signUp(t.app);
    await t.app.inject({ method: 'POST', url: '/tokens', payload: { email: gus.user.email, password: gus.password } });
    const first = await t.app.inject({ url: '/tokens?limit=1', headers: gus.auth });
    expect(first.json()).toEqual({
      data: [expect.objectContaining({ id: gus.tokenId })],
      limit: 1,
      hasMore: true,
      nextCursor: gus.tokenId,
      prevCursor: null,
    });
    expect(first.headers.link).toBe(`</tokens?limit=1&after=${gus.tokenId}>; rel="next"`);
    const second = await t.app.inject({ url: `/tokens?limit=1&after=${gus.tokenId}`, headers: gus.auth });
    expect(second.json()).toMatchObject({ limit: 1, hasMore: false, nextCursor: null });
    expect(second.json().data).toHaveLength(1);
    expect(second.headers.link).toBe(`</tokens?limit=1&before=${second.json().data[0].id}>; rel="prev"`);
  });
});
