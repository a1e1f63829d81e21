/**
 * The OpenAPI document is what a generated client sees (issue 15): it states
 * the headers the contract promises, types path ids as the integers they are,
 * names every operation, says where a token is optional, documents every error
 * the service gives, states its rules in patterns every regex engine reads
 * alike, and carries an ETag. Every response of the integration suite is
 * checked against it (helpers/openapi-conformance.ts); the checker itself is
 * tested last.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { useTestApp } from '../helpers/factories.js';
import { expect422 } from '../helpers/expect.js';
import { Conformance } from '../helpers/openapi-conformance.js';

const t = useTestApp();
const ann = t.user();
let doc: any;
beforeAll(async () => {
  doc = (await t.app.inject({ url: '/openapi.json' })).json();
});

type Op = {
  operationId?: string;
  security?: unknown[];
  parameters?: { in: string; name: string; schema: Record<string, unknown> }[];
  responses: Record<string, { description: string; headers?: Record<string, unknown> }>;
  requestBody?: { content: Record<string, unknown> };
};
const operations = (): [string, string, Op][] =>
  Object.entries(doc.paths as Record<string, Record<string, Op>>).flatMap(([path, item]) =>
    Object.entries(item).map(([method, op]) => [path, method, op] as [string, string, Op]),
  );

describe('GET /openapi.json', () => {
  it('is OpenAPI 3.1 and documents Link on every list and Location on every create', () => {
    expect(doc.openapi).toBe('3.1.0');
    const lists = ['/posts', '/users', '/tokens', '/posts/{postId}/comments', '/users/{userId}/posts'];
    for (const path of lists) expect(Object.keys(doc.paths[path].get.responses['200'].headers), path).toContain('Link');
    for (const path of ['/posts', '/users', '/posts/{postId}/comments'])
      expect(Object.keys(doc.paths[path].post.responses['201'].headers), path).toContain('Location');
    expect(Object.keys(doc.components.schemas)).toEqual(expect.arrayContaining(['Error', 'User', 'Post', 'Comment']));
  });

  it('types path ids as integers, like the ids in bodies', () => {
    const ids = operations().flatMap(([, , op]) => (op.parameters ?? []).filter((p) => p.in === 'path'));
    expect(ids.length).toBeGreaterThan(10);
    for (const p of ids) expect(p.schema, p.name).toMatchObject({ type: 'integer', minimum: 1, format: 'int64' });
  });

  it('names every operation, uniquely', () => {
    const names = operations().map(([path, method, op]) => op.operationId ?? `${method} ${path} has none`);
    expect(names.filter((n) => !/^[a-z][A-Za-z]+$/.test(n))).toEqual([]);
    expect(new Set(names).size).toBe(names.length);
  });

  it('says which operations need a token, and that the others need none (Swagger UI shows a padlock on the first only)', () => {
    for (const [path, method, op] of operations()) {
      const needsToken = JSON.stringify(op.security) === JSON.stringify([{ bearerAuth: [] }]);
      const anyone = JSON.stringify(op.security) === JSON.stringify([{}]);
      expect(needsToken || anyone, `${method} ${path}`).toBe(true);
    }
    for (const [path, method] of [
      ['/posts', 'get'],
      ['/posts/{postId}', 'get'],
      ['/users', 'post'],
      ['/tokens', 'post'],
    ] as const)
      expect(doc.paths[path][method].security, `${method} ${path}`).toEqual([{}]);
    for (const [path, method] of [
      ['/posts', 'post'],
      ['/users/me', 'get'],
      ['/posts/{postId}', 'delete'],
    ] as const)
      expect(doc.paths[path][method].security, `${method} ${path}`).toEqual([{ bearerAuth: [] }]);
  });

  it('documents WWW-Authenticate on every 401, Retry-After on 429/503, Allow on the 405 of any known path', () => {
    for (const [path, method, op] of operations()) {
      for (const [status, response] of Object.entries(op.responses)) {
        expect(response.description, `${method} ${path} ${status}`).not.toBe('Default Response');
        const headers = Object.keys(response.headers ?? {});
        if (status === '401') expect(headers, `${method} ${path}`).toContain('WWW-Authenticate');
        if (status === '429' || status === '503') expect(headers, `${method} ${path}`).toContain('Retry-After');
      }
      expect(Object.keys(op.responses), `${method} ${path}: unknown query parameters are a 422 everywhere`).toContain(
        '422',
      );
    }
    expect(Object.keys(doc.components.responses.MethodNotAllowed.headers)).toContain('Allow');
    expect(doc.components.headers['WWW-Authenticate'].schema.type).toBe('string');
  });

  it('every PATCH takes application/merge-patch+json', () => {
    const patches = operations().filter(([, method]) => method === 'patch');
    expect(patches).toHaveLength(4);
    for (const [path, , op] of patches)
      expect(Object.keys(op.requestBody!.content), path).toEqual(['application/json', 'application/merge-patch+json']);
  });

  it('declares read-only members in bodies as what the service takes and ignores: any value', () => {
    const members = ['id', 'authorId', 'postId', 'commentCount', 'createdAt', 'updatedAt'];
    const bodies = operations().flatMap(([path, method, op]) =>
      Object.values(
        (op.requestBody?.content ?? {}) as Record<string, { schema: { properties?: Record<string, object> } }>,
      ).map((media) => [`${method} ${path}`, media.schema.properties ?? {}] as const),
    );
    expect(bodies.length).toBeGreaterThan(8);
    for (const [where, properties] of bodies) {
      for (const name of members) {
        if (!(name in properties)) continue;
        const { description, ...schema } = properties[name] as { description: string };
        expect(schema, `${where} ${name}`).toEqual({ readOnly: true });
        expect(description, `${where} ${name}`).toMatch(/^read-only: any value is accepted and ignored/);
      }
    }
  });

  it('says fields names are distinct: an array of known names with uniqueItems, sent repeated (or comma-separated)', () => {
    const lists = operations().flatMap(([path, method, op]) =>
      (op.parameters ?? []).filter((p) => p.name === 'fields').map((p) => [`${method} ${path}`, p] as const),
    );
    expect(lists.length).toBe(7);
    for (const [where, parameter] of lists) {
      expect(parameter, where).toMatchObject({
        in: 'query',
        style: 'form',
        explode: true,
        schema: { type: 'array', uniqueItems: true, items: { type: 'string' } },
      });
      const { items, maxItems } = parameter.schema as { items: { enum: string[] }; maxItems: number };
      expect(maxItems, where).toBe(items.enum.length);
    }
  });

  it('writes its patterns without surrogate ranges, \\s or \\u escapes, which other regex engines read differently', () => {
    const patterns = JSON.stringify(doc).match(/"pattern":"(?:[^"\\]|\\.)*"/g) ?? [];
    expect(patterns.length).toBeGreaterThan(5);
    for (const pattern of patterns) {
      const source = JSON.parse(`{${pattern}}`).pattern as string;
      expect(source, source).not.toMatch(/\\u|\\s|\\S|[\uD800-\uDFFF]/);
    }
  });

  it('carries an ETag, and answers If-None-Match naming it with a 304', async () => {
    // Sent as it is, whatever the client accepts.
    const plain = await t.app.inject({ url: '/openapi.json', headers: { 'accept-encoding': 'br, gzip' } });
    const tag = plain.headers.etag as string;
    expect(tag).toMatch(/^"b[A-Za-z0-9_-]{22}"$/);
    expect(plain.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.headers['cache-control']).toBe('public, max-age=0, s-maxage=1');
    const again = await t.app.inject({ url: '/openapi.json', headers: { 'if-none-match': tag } });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');
    expect(again.headers.etag).toBe(tag);
    const docs = await t.app.inject({ url: '/docs/json' });
    expect(docs.body).toBe(plain.body);
    expect((await t.app.inject({ url: '/docs/json', headers: { 'if-none-match': tag } })).statusCode).toBe(304);
  });
});

describe('what the document says is what the service does', () => {
  it('the e-mail rule is the documented pattern: 0@com is refused by both', async () => {
    const pattern = new RegExp(
      doc.paths['/users'].post.requestBody.content['application/json'].schema.properties.email.pattern,
      'u',
    );
    for (const [email, valid] of [
      ['0@com', false],
      ['a@b.co', true],
      ['"quoted"@example.com', false],
      ['x@[127.0.0.1]', false],
      ["o'neil+tag@mail.example.org", true],
    ] as const) {
      expect(pattern.test(email), email).toBe(valid);
      const res = await t.app.inject({
        method: 'POST',
        url: '/users',
        payload: { name: 'E', email, password: 'password-1' },
      });
      if (valid) expect(res.statusCode, email).toBe(201);
      else expect422(res, { email: ['must be a valid e-mail address'] });
    }
  });

  it('lone surrogates are refused without a surrogate range in any pattern', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'content-type': 'application/json' },
      payload: '{"title":"a\\ud800b","body":"ok \\ud83d\\ude00"}',
    });
    expect422(res, { title: ['must not contain unpaired surrogates'] });
    const nul = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: 'a\u0000', body: 'x' },
    });
    expect422(nul, { title: ['must not contain U+0000'] });
    const blank = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: ' \u0085\u3000\uFEFF', body: 'x' },
    });
    expect422(blank, { title: ['must not be blank'] });
  });

  it('read-only members are ignored whatever their value, as readOnly means', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: ann.auth,
      payload: { title: 'T', body: 'B', id: 'x', createdAt: {} },
    });
    expect(res.statusCode).toBe(201);
  });

  it('an If-None-Match or If-Match over 8 192 characters is the documented 422', async () => {
    const post = (
      await t.app.inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: { title: 'T', body: 'B' } })
    ).json();
    const long = `"${'a'.repeat(8192)}"`;
    expect422(await t.app.inject({ url: `/posts/${post.id}`, headers: { 'if-none-match': long } }), {
      'If-None-Match': ['must be at most 8192 characters'],
    });
    expect422(
      await t.app.inject({ method: 'DELETE', url: `/posts/${post.id}`, headers: { ...ann.auth, 'if-match': long } }),
      {
        'If-Match': ['must be at most 8192 characters'],
      },
    );
    for (const op of [doc.paths['/posts/{postId}'].get, doc.paths['/posts/{postId}'].delete])
      expect(op.responses['422']).toBeDefined();
  });
});

describe('the conformance check fails on drift', () => {
  const conformance = () => new Conformance(doc);
  const response = (statusCode: number, body: unknown, headers: Record<string, string> = {}) =>
    ({
      statusCode,
      headers: { 'content-type': 'application/json; charset=utf-8', 'x-request-id': 'r1', ...headers },
      body: body === undefined ? '' : JSON.stringify(body),
    }) as unknown as LightMyRequestResponse;
  const error = (status: string) => ({ error: status, message: 'm', requestId: 'r1' });

  it('passes what the document says', () => {
    conformance().check('GET', '/health/live', response(200, { status: 'ok', version: '1.2.3' }));
    conformance().check('DELETE', '/health/live', response(405, error('method_not_allowed'), { allow: 'GET, HEAD' }));
  });

  it.each([
    ['an undocumented status', 'GET', '/health/live', response(404, error('not_found'))],
    ['a body off the schema', 'GET', '/health/live', response(200, { status: 'fine' })],
    ['a missing Content-Type', 'GET', '/posts/1', response(200, undefined, { 'content-type': '' })],
    [
      'an undocumented contract header',
      'GET',
      '/health/live',
      response(200, { status: 'ok', version: '1.2.3' }, { location: '/x' }),
    ],
    ['a header off its schema', 'GET', '/posts', response(401, error('unauthorized'), { 'www-authenticate': 'Basic' })],
    ['an error body with extra members', 'GET', '/nowhere', response(404, { ...error('not_found'), stack: 'x' })],
  ])('fails on %s', (_what, method, url, res) => {
    expect(() => conformance().check(method, url, res)).toThrow();
  });
});
