/** Structured request logs without secrets, security headers, CORS from CORS_ORIGINS. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import type { FastifyInstance } from 'fastify';
import { checkAgainstDocument } from '../helpers/openapi-conformance.js';
import { createTestDatabase, type TestDatabase, onTopology } from '../helpers/database.js';
import { logLines } from '../helpers/cleanups.js';
import { testConfig } from '../helpers/factories.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

async function appWithLogs(env: Record<string, string> = {}) {
  const { stream: logStream, lines } = logLines();
  const app = await buildApp({ ...testConfig({ LOG_LEVEL: 'info', ...env }), ...onTopology(db.url) }, { logStream });
  await checkAgainstDocument(app as unknown as FastifyInstance);
  return { app, lines };
}

describe('request logs', () => {
  it('one JSON line per request with id, method, route, status and duration; no credentials', async () => {
    const { app, lines } = await appWithLogs();
    const password = 'super-secret-password';
    const signUp = await app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'Log', email: 'log@example.com', password },
      headers: { 'x-request-id': 'req-1' },
    });
    expect(signUp.statusCode).toBe(201);
    const login = await app.inject({ method: 'POST', url: '/tokens', payload: { email: 'log@example.com', password } });
    const token = login.json().token as string;
    await app.inject({
      url: `/users/${signUp.json().id}`,
      headers: { authorization: `Bearer ${token}`, 'x-request-id': 'req-3' },
    });
    await app.inject({ url: '/users/me', headers: { authorization: 'Bearer pat_wrong-token-value' } });
    await app.close();

    const text = JSON.stringify(lines);
    expect(text).not.toContain(password);
    expect(text).not.toContain(token);
    expect(text).not.toContain('pat_wrong-token-value');

    const done = lines.filter((l) => l.msg === 'request done');
    expect(done).toHaveLength(4);
    expect(done[0]).toMatchObject({ requestId: 'req-1', method: 'POST', route: '/users', url: '/users', status: 201 });
    expect(typeof done[0]!.durationMs).toBe('number');
    expect(done[2]).toMatchObject({
      requestId: 'req-3',
      method: 'GET',
      route: '/users/:userId',
      status: 200,
      userId: signUp.json().id,
    });
    expect(done[3]).toMatchObject({ route: '/users/me', status: 401 });
  });
});

describe('security headers and CORS', () => {
  it('sends security headers on every response; no CORS unless configured', async () => {
    const { app } = await appWithLogs({ LOG_LEVEL: 'silent' });
    const res = await app.inject({ url: '/health/live', headers: { origin: 'https://evil.example' } });
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['content-security-policy']).toBe("default-src 'none';frame-ancestors 'none'");
    expect(res.headers['strict-transport-security']).toBeDefined();
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    const docs = await app.inject({ url: '/docs/' });
    expect(docs.statusCode).toBe(200);
    expect(docs.headers['content-security-policy']).not.toBe("default-src 'none';frame-ancestors 'none'");
    await app.close();
  });

  it('allows the listed origins and exposes the headers clients need', async () => {
    const { app } = await appWithLogs({ LOG_LEVEL: 'silent', CORS_ORIGINS: 'https://app.example' });
    const ok = await app.inject({ url: '/health/live', headers: { origin: 'https://app.example' } });
    expect(ok.headers['access-control-allow-origin']).toBe('https://app.example');
    expect(String(ok.headers['access-control-expose-headers'])).toContain('Link');
    const other = await app.inject({ url: '/health/live', headers: { origin: 'https://evil.example' } });
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/users',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.statusCode).toBe(204);
    expect(String(preflight.headers['access-control-allow-headers'])).toContain('Authorization');
    await app.close();
  });
});
