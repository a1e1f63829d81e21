/**
 * Every list-valued query parameter the document names (`fields`, `type`) takes the comma form
 * (`fields=title,body`) and the repeated form (`fields=title&fields=body`, what openapi-fetch and other
 * generated clients send) as the same list: the same answer, the same 422s. Every other query parameter takes one
 * value: given twice, it is a 422 that says it is repeated.
 */
import { beforeAll, expect, it } from 'vitest';
import { createComment, createPost, useTestApp } from '../helpers/factories.js';
import { waitUntil } from '../helpers/processes.js';

const t = useTestApp();
const ann = t.user({ name: 'Ann' });

interface Parameter {
  name: string;
  in: string;
  style?: string;
  explode?: boolean;
  schema: { type?: string; items?: { enum?: string[] } };
}
type Document = { paths: Record<string, Record<string, { parameters?: Parameter[] }>> };
const lists: { path: string; parameter: Parameter }[] = [];
const ids: Record<string, number> = {};

beforeAll(async () => {
  const post = await createPost(t.app, ann);
  const comment = await createComment(t.app, ann, post.id);
  Object.assign(ids, { userId: ann.user.id, postId: post.id, commentId: comment.id });
  const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json<Document>();
  for (const [path, item] of Object.entries(doc.paths))
    for (const parameter of item.get?.parameters ?? [])
      if (parameter.in === 'query' && parameter.schema.type === 'array') lists.push({ path, parameter });
  // Events are numbered just after their commit: wait until the feed shows both.
  await waitUntil('both events are numbered', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/events?type=post.created,comment.created' });
    return (res.json<{ data: unknown[] }>().data ?? []).length === 2;
  });
});

it('finds the list parameters, each described as the repeated form (style form, explode true)', () => {
  expect(lists.map(({ path, parameter }) => `${path} ${parameter.name}`).sort()).toEqual([
    '/events type',
    '/events/stream type',
    '/posts fields',
    '/posts/{postId} fields',
    '/posts/{postId}/comments fields',
    '/posts/{postId}/comments/{commentId} fields',
    '/users fields',
    '/users/{userId} fields',
    '/users/{userId}/posts fields',
  ]);
  for (const { path, parameter } of lists) expect(parameter, path).toMatchObject({ style: 'form', explode: true });
});

it('the repeated form is the comma form: the same answer, valid or not', async () => {
  for (const { path, parameter } of lists) {
    const url = path.replace(/\{(\w+)\}/g, (_, name: string) => String(ids[name]));
    const [a = '', b = ''] = parameter.schema.items?.enum ?? [];
    // The stream never ends: only its refusals are compared.
    const valid = path.endsWith('/stream') ? [] : [[a], [a, b], [b, a]];
    for (const values of [...valid, [a, a], [a, 'nope'], [a, ''], ['']]) {
      const comma = `${parameter.name}=${values.join(',')}`;
      const repeated = values.map((v) => `${parameter.name}=${v}`).join('&');
      const [x, y] = await Promise.all(
        [comma, repeated].map((query) => t.app.inject({ method: 'GET', url: `${url}?${query}` })),
      );
      const where = `${url}?${repeated}`;
      expect(y!.statusCode, where).toBe(x!.statusCode);
      expect(x!.statusCode, where).toBe(valid.includes(values) ? 200 : 422);
      const { requestId: _x, ...bodyX } = x!.json<Record<string, unknown>>();
      const { requestId: _y, ...bodyY } = y!.json<Record<string, unknown>>();
      expect(bodyY, where).toEqual(bodyX);
    }
  }
});

it('a scalar parameter given more than once is a 422 that says so, on every route', async () => {
  const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json<Document>();
  const scalars: { path: string; name: string }[] = [];
  for (const [path, item] of Object.entries(doc.paths))
    for (const parameter of item.get?.parameters ?? [])
      if (parameter.in === 'query' && parameter.schema.type !== 'array') scalars.push({ path, name: parameter.name });
  expect(scalars.length).toBeGreaterThan(50);
  for (const { path, name } of scalars) {
    // The query is checked before the path's resource is looked up: any id will do.
    const url = path.replace(/\{\w+\}/g, '1');
    // The same value twice, and two different ones: either way the parameter is not one value.
    for (const values of [
      ['1', '1'],
      ['5', '6'],
    ]) {
      const query = values.map((v) => `${name}=${v}`).join('&');
      const res = await t.app.inject({ method: 'GET', url: `${url}?${query}`, headers: ann.auth });
      expect(res.statusCode, `${url}?${query}`).toBe(422);
      expect(res.json<{ fieldErrors: unknown }>().fieldErrors, `${url}?${query}`).toEqual({
        [name]: ['must be given once'],
      });
    }
  }
});

it('a repeated scalar is reported with the other problems of the request', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/posts?perPage=5&perPage=6&sort=nope&colour=red' });
  expect(res.json()).toMatchObject({
    error: 'validation',
    fieldErrors: {
      perPage: ['must be given once'],
      sort: [expect.stringMatching(/^must be one of/)],
      colour: ['is not allowed'],
    },
  });
});
