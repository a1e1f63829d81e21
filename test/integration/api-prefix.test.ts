/**
 * API_PREFIX (docs/api.md §1): every route family answers under the prefix,
 * and neither without it nor under it twice (issue #34: the event routes once
 * answered at /v1/v1/events).
 */
import { expect, it } from 'vitest';
import { useTestApp } from '../helpers/factories.js';

const t = useTestApp({ API_PREFIX: '/v1', WEBHOOK_CONCURRENCY: '0' });

it('every route family answers under /v1, and not at /v1/v1 nor without the prefix', async () => {
  const login = { email: 'prefix@example.com', password: 'password-1' };
  expect((await t.app.inject({ method: 'POST', url: '/v1/users', payload: { ...login, name: 'P' } })).statusCode).toBe(
    201,
  );
  const { token } = (await t.app.inject({ method: 'POST', url: '/v1/tokens', payload: login })).json();
  const created = await t.app.inject({
    method: 'POST',
    url: '/v1/posts',
    headers: { authorization: `Bearer ${token}` },
    payload: { title: 'T', body: 'B' },
  });
  expect(created.statusCode).toBe(201);
  const postId = created.json().id as number;
  const probes: [method: 'GET' | 'POST', path: string, status: number][] = [
    ['GET', '/health/live', 200],
    ['GET', '/health/ready', 200],
    ['POST', '/users', 422],
    ['POST', '/tokens', 422],
    ['GET', '/posts', 200],
    ['GET', `/posts/${postId}/comments`, 200],
    ['GET', '/events', 200],
    ['GET', '/events/stream?type=nope', 422],
    ['GET', '/webhooks', 401],
    ['GET', '/openapi.json', 200],
    ['GET', '/docs/json', 200],
  ];
  for (const [method, path, status] of probes) {
    const payload = method === 'POST' ? {} : undefined;
    const res = await t.app.inject({ method, url: `/v1${path}`, payload });
    expect(res.statusCode, `${method} /v1${path}: ${res.body}`).toBe(status);
    for (const wrong of [`/v1/v1${path}`, path]) {
      const miss = await t.app.inject({ method, url: wrong, payload });
      expect(miss.statusCode, `${method} ${wrong}`).toBe(404);
    }
  }
});
