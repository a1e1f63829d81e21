/**
 * Seams between mechanisms: a path id too long for the router still goes
 * through the whole pipeline, and links never point where the request target
 * said but to this service.
 */
import { onTopology } from '../helpers/database.js';
import net, { type AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { logLines } from '../helpers/cleanups.js';
import { testConfig, useTestApp } from '../helpers/factories.js';
import { expect404, expect422, expectError, offsetLinks } from '../helpers/expect.js';

const t = useTestApp({ RATE_LIMIT_MAX: '1000' });
const ann = t.user();

const longId = '9'.repeat(150);

async function listening(app: FastifyInstance): Promise<number> {
  if (!app.server.listening) await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as AddressInfo).port;
}

/** One HTTP/1.1 exchange with the request target written exactly as given. */
function raw(port: number, method: string, target: string, headers: Record<string, string> = {}, body?: object) {
  return new Promise<{ status: number; headers: Record<string, string>; body: string }>((resolve, reject) => {
    const payload = body === undefined ? '' : JSON.stringify(body);
    const lines = [`${method} ${target} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close'];
    for (const [name, value] of Object.entries(headers)) if (name !== 'host') lines.push(`${name}: ${value}`);
    if (body !== undefined)
      lines.push('content-type: application/json', `content-length: ${Buffer.byteLength(payload)}`);
    const socket = net.connect(port, '127.0.0.1', () => socket.write(`${lines.join('\r\n')}\r\n\r\n${payload}`));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString();
      const [head = '', ...rest] = text.split('\r\n\r\n');
      const [statusLine = '', ...headerLines] = head.split('\r\n');
      const parsed: Record<string, string> = {};
      for (const line of headerLines) {
        const i = line.indexOf(':');
        parsed[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers: parsed, body: rest.join('\r\n\r\n') });
    });
  });
}

describe('a path id longer than any id', () => {
  it('is the usual 404, with the request id, rate-limit and security headers', async () => {
    const res = await t.app.inject({ url: `/posts/${longId}/comments`, headers: { 'x-request-id': 'long-id-1' } });
    expect404(res, `/posts/${longId}/comments does not exist`);
    expect(res.headers['x-request-id']).toBe('long-id-1');
    expect(res.headers['ratelimit-limit']).toBe('1000');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
  });

  it('keeps the error order: 401 for a bad token and 422 for a bad query come first', async () => {
    const bad = await t.app.inject({
      url: `/users/${longId}`,
      headers: { authorization: 'Bearer pat_not-a-real-token' },
    });
    expectError(bad, 401, 'unauthorized', 'the access token is malformed, unknown, expired or revoked');
    const query = await t.app.inject({ url: `/users/${longId}/posts?perPage=0` });
    expect422(query, { perPage: ['must be at least 1'] });
  });

  it('a known path with another method is still a 405', async () => {
    const res = await t.app.inject({ method: 'DELETE', url: `/users/${longId}` });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe('GET, HEAD, PATCH');
  });

  it('is counted by the rate limiter and written to the access log', async () => {
    const { stream: logStream, lines } = logLines();
    const config = testConfig({ LOG_LEVEL: 'info', RATE_LIMIT_MAX: '1' });
    const app = (await buildApp({ ...config, ...onTopology(t.db.url) }, { logStream })) as unknown as FastifyInstance;
    try {
      expect((await app.inject({ url: `/posts/${longId}` })).statusCode).toBe(404);
      const limited = await app.inject({ url: `/posts/${longId}` });
      expect(limited.statusCode).toBe(429);
      expect(limited.headers['retry-after']).toBeDefined();
    } finally {
      await app.close();
    }
    expect(lines.filter((l) => l.msg === 'request done').map((l) => l.status)).toEqual([404, 429]);
  });
});

describe('links in responses', () => {
  // app.inject normalizes the target to a path, so these go over a real socket.
  it('an absolute-form request target moves neither Location nor Link to its host', async () => {
    const port = await listening(t.app);
    const created = await raw(
      port,
      'POST',
      'http://evil.example/posts',
      { ...ann.auth, host: 'evil.example' },
      { title: 'T', body: 'B' },
    );
    expect(created.status).toBe(201);
    const id = (JSON.parse(created.body) as { id: number }).id;
    expect(created.headers.location).toBe(`/posts/${id}`);

    const comment = await raw(port, 'POST', `http://evil.example/posts/${id}/comments`, ann.auth, { body: 'c' });
    expect(comment.headers.location).toBe(`/posts/${id}/comments/${(JSON.parse(comment.body) as { id: number }).id}`);

    const list = await raw(port, 'GET', `http://evil.example/posts/${id}/comments?perPage=1`);
    expect(list.status).toBe(200);
    expect(offsetLinks(list.headers.link)).toBe(
      `</posts/${id}/comments?perPage=1&page=1>; rel="first", </posts/${id}/comments?perPage=1&page=1>; rel="last"`,
    );
    await raw(port, 'POST', '/posts', ann.auth, { title: 'T2', body: 'B2' });
    const cursor = await raw(port, 'GET', 'http://evil.example/posts?limit=1');
    expect(cursor.headers.link).toMatch(/^<\/posts\?limit=1&after=\d+>; rel="next"$/);
  });

  it('under API_PREFIX they are paths under it, whatever the target or Host said', async () => {
    const config = testConfig({ API_PREFIX: '/v1' });
    const app = (await buildApp({ ...config, ...onTopology(t.db.url) })) as unknown as FastifyInstance;
    try {
      const port = await listening(app);
      const res = await raw(port, 'POST', 'http://evil.example/v1/posts', ann.auth, { title: 'T', body: 'B' });
      expect(res.status).toBe(201);
      expect(res.headers.location).toBe(`/v1/posts/${(JSON.parse(res.body) as { id: number }).id}`);
      const list = await raw(port, 'GET', '/v1/posts?perPage=1&page=2', { host: 'evil.example' });
      expect(offsetLinks(list.headers.link)).toContain('</v1/posts?perPage=1&page=1>; rel="first"');
    } finally {
      await app.close();
    }
  });
});
