/**
 * Seams between the HTTP mechanics (issue 15): every JSON answer names its
 * media type, request charsets in every spelling of UTF-8, unknown query
 * parameters on every route, bodyless methods with a Content-Type, the one
 * written form of integers in URLs, and methods a path lacks whatever body
 * they carry.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createComment, createPost, useTestApp } from '../helpers/factories.js';
import { expect404, expect422, expectError } from '../helpers/expect.js';

const JSON_TYPE = 'application/json; charset=utf-8';
const NOT_CANONICAL = 'must be written in plain decimal digits (no sign, leading zero, exponent or spaces)';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });
let postId: number;
let commentId: number;

beforeAll(async () => {
  postId = (await createPost(t.app, ann)).id;
  commentId = (await createComment(t.app, ann, postId)).id;
});

describe('Content-Type of every JSON answer', () => {
  const lists = () => ['/posts', `/posts/${postId}/comments`, '/users', `/users/${ann.user.id}/posts`, '/tokens'];

  it.each(['GET', 'HEAD'] as const)(
    '%s on every list, in both pagination modes, says application/json; charset=utf-8',
    async (method) => {
      // Twice each: the second GET of a public list is a response cache hit.
      for (const url of [...lists(), ...lists()]) {
        for (const query of ['', '?page=1&perPage=5', '?limit=5']) {
          const res = await t.app.inject({ method, url: `${url}${query}`, headers: ann.auth });
          expect(res.statusCode, url + query).toBe(200);
          expect(res.headers['content-type'], `${method} ${url}${query}`).toBe(JSON_TYPE);
          if (method === 'GET') expect(Array.isArray(res.json().data)).toBe(true);
          else expect(res.body).toBe('');
        }
      }
    },
  );

  it('single resources, creates and /openapi.json say it too', async () => {
    for (const url of [
      `/posts/${postId}`,
      `/posts/${postId}/comments/${commentId}`,
      `/users/${ann.user.id}`,
      '/users/me',
      '/openapi.json',
    ]) {
      const res = await t.app.inject({ url, headers: ann.auth });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type'], url).toBe(JSON_TYPE);
    }
  });
});

describe('request charset', () => {
  it.each(['utf-8', 'UTF-8', 'utf8', 'UTF8', '"utf-8"', '"UTF8"', 'csUTF8'])('charset=%s is UTF-8', async (charset) => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'content-type': `application/json; charset=${charset}` },
      payload: JSON.stringify({ title: 'Zoë', body: 'ünïcödé' }),
    });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ title: 'Zoë', body: 'ünïcödé' });
  });

  it.each(['latin1', 'iso-8859-1', 'utf-16', 'utf-88', '""'])('charset=%s is a 415', async (charset) => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'content-type': `application/json;charset=${charset}` },
      payload: JSON.stringify({ title: 'x', body: 'y' }),
    });
    expectError(res, 415, 'unsupported_media_type', 'JSON must be UTF-8: send charset=utf-8 or no charset');
  });

  const send = (method: 'POST' | 'PATCH', contentType: string) =>
    t.app.inject({
      method,
      url: method === 'POST' ? '/posts' : `/posts/${postId}`,
      headers: { ...ann.auth, 'content-type': contentType },
      payload: JSON.stringify({ title: 'x', body: 'y' }),
    });

  it.each([
    'application/json; charset=utf-8; charset=latin1',
    'application/json; charset=utf-8; CHARSET=utf-8',
    'application/json; charset="utf-8',
    'application/json; charset=utf-8"',
    'application/json; charset=utf-8 x',
    'application/json; charset = utf-8',
    'application/json; charset',
    'application/json; =utf-8',
    'application/json; foo',
    'application/merge-patch+json; charset="utf-8; q=1',
  ])('a repeated or malformed parameter is a 415: %s', async (contentType) => {
    const method = contentType.startsWith('application/merge-patch+json') ? 'PATCH' : 'POST';
    expectError(
      await send(method, contentType),
      415,
      'unsupported_media_type',
      'Content-Type has a malformed or repeated parameter: send application/json; charset=utf-8',
    );
  });

  it.each([
    ['POST', 'application/json'],
    ['POST', 'application/json;charset=UTF-8'],
    ['POST', 'application/json ; charset="utf-8"'],
    ['POST', 'Application/JSON; Charset=utf8'],
    ['POST', 'application/json; charset=utf-8;'],
    ['POST', 'application/json; profile="a \\"quoted\\" value"; charset=utf-8'],
    ['PATCH', 'application/merge-patch+json'],
    ['PATCH', 'application/merge-patch+json; charset=UTF-8'],
  ] as const)('%s with %s is taken', async (method, contentType) => {
    expect((await send(method, contentType)).statusCode, contentType).toBe(method === 'POST' ? 201 : 200);
  });
});

describe('unknown query parameters are a 422 on every route', () => {
  const routes = () =>
    [
      ['GET', `/posts/${postId}`],
      ['HEAD', `/posts/${postId}`],
      ['GET', `/posts/${postId}/comments/${commentId}`],
      ['GET', `/users/${ann.user.id}`],
      ['GET', '/users/me'],
      ['GET', '/health/live'],
      ['GET', '/health/ready'],
      ['GET', '/openapi.json'],
      ['PATCH', `/posts/${postId}`, { title: 'x' }],
      ['PUT', `/posts/${postId}`, { title: 'x', body: 'y' }],
      ['POST', '/posts', { title: 'x', body: 'y' }],
      ['POST', `/posts/${postId}/comments`, { body: 'y' }],
      ['PATCH', `/users/${ann.user.id}`, { name: 'x' }],
      ['DELETE', `/posts/${postId}/comments/${commentId}`],
      ['DELETE', `/tokens/${ann.tokenId}`],
      ['POST', '/tokens', { email: ann.user.email, password: ann.password }],
    ] as const;

  it('names the parameter, and nothing is done', async () => {
    for (const [method, url, payload] of routes()) {
      const res = await t.app.inject({ method, url: `${url}?foo=1`, headers: ann.auth, ...(payload && { payload }) });
      expect(res.statusCode, `${method} ${url}`).toBe(422);
      expect(res.headers['content-type']).toBe(JSON_TYPE);
      if (method !== 'HEAD') expect422(res, { foo: ['is not allowed'] });
    }
    // The DELETEs above did nothing.
    expect((await t.app.inject({ url: `/posts/${postId}/comments/${commentId}` })).statusCode).toBe(200);
    expect((await t.app.inject({ url: '/users/me', headers: ann.auth })).statusCode).toBe(200);
  });
});

describe('a method that takes no body, with Content-Type and an empty body', () => {
  it.each(['application/json', 'application/json; charset=utf-8', 'text/plain'])(
    'DELETE with Content-Type: %s is no error',
    async (type) => {
      const post = await t.app.inject({
        method: 'POST',
        url: '/posts',
        headers: ann.auth,
        payload: { title: 'gone', body: 'soon' },
      });
      const res = await t.app.inject({
        method: 'DELETE',
        url: `/posts/${post.json().id}`,
        headers: { ...ann.auth, 'content-type': type, 'content-length': '0' },
      });
      expect(res.statusCode).toBe(204);
      expect(res.body).toBe('');
    },
  );

  it('an empty body on POST is still a 400: POST takes one', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/posts',
      headers: { ...ann.auth, 'content-type': 'application/json', 'content-length': '0' },
    });
    expectError(res, 400, 'bad_request', 'body is not valid JSON');
  });
});

describe('integers in the URL have one written form', () => {
  it.each(['01', '1e1', '%201', '1%20', '+1', '1.0', '0x1', '1_0'])('page=%s is a 422 naming page', async (value) => {
    const res = await t.app.inject({ url: `/posts?page=${value}` });
    expect422(res, { page: [value === '1_0' ? 'must be an integer' : NOT_CANONICAL] });
  });

  it('on every integer parameter of every list', async () => {
    const cases = [
      ['/posts', 'perPage'],
      ['/posts', 'limit'],
      ['/posts', 'after'],
      ['/posts', 'author'],
      [`/posts/${postId}/comments`, 'author'],
      [`/users/${ann.user.id}/posts`, 'page'],
      ['/users', 'perPage'],
      ['/tokens', 'limit'],
    ];
    for (const [url, name] of cases) {
      const res = await t.app.inject({ url: `${url}?${name}=007`, headers: ann.auth });
      expect422(res, { [name!]: [NOT_CANONICAL] });
    }
  });

  it('canonical values still work, and so do the other rules', async () => {
    expect((await t.app.inject({ url: '/posts?page=10&perPage=100' })).statusCode).toBe(200);
    expect422(await t.app.inject({ url: '/posts?page=0' }), { page: ['must be at least 1'] });
    expect422(await t.app.inject({ url: '/posts?page=abc&perPage=01' }), {
      page: ['must be an integer'],
      perPage: [NOT_CANONICAL],
    });
  });

  it('a path id not in canonical digits names no resource: 404', async () => {
    for (const id of [`0${postId}`, `${postId}.0`, `+${postId}`, '1e1']) {
      expect404(await t.app.inject({ url: `/posts/${id}` }), `/posts/${id} does not exist`);
    }
  });
});

describe('a method the path lacks is a 405 whatever body it carries', () => {
  it('QUERY with a body and no Content-Type', async () => {
    const res = await t.app.inject({
      method: 'QUERY',
      url: '/posts',
      payload: 'x',
      headers: { 'content-type': undefined },
    });
    expectError(res, 405, 'method_not_allowed', 'QUERY is not supported on /posts; use GET, HEAD, POST');
    expect(res.headers.allow).toBe('GET, HEAD, POST');
  });

  it.each(['PROPFIND', 'TRACE', 'SEARCH'])('%s with a body and no Content-Type', async (method) => {
    const res = await t.app.inject({
      method: method as 'GET',
      url: `/posts/${postId}`,
      payload: 'x',
      headers: { 'content-type': undefined },
    });
    expectError(
      res,
      405,
      'method_not_allowed',
      `${method} is not supported on /posts/${postId}; use DELETE, GET, HEAD, PATCH, PUT`,
    );
  });

  it('PUT on a collection with a body that is not JSON, or not even allowed', async () => {
    for (const [payload, type] of [
      ['{not json', 'application/json'],
      ['a=b', 'application/x-www-form-urlencoded'],
    ]) {
      const res = await t.app.inject({ method: 'PUT', url: '/posts', payload, headers: { 'content-type': type } });
      expectError(res, 405, 'method_not_allowed', 'PUT is not supported on /posts; use GET, HEAD, POST');
    }
  });

  it('an unknown path with a body is a 404, not a 400 or 415', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/nothing',
      payload: '{',
      headers: { 'content-type': 'text/plain' },
    });
    expectError(res, 404, 'not_found', 'no route POST /nothing');
  });
});
