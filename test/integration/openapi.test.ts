/** The OpenAPI document states the headers docs/api.md promises: Link on every list, Location on creates. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/factories.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('GET /openapi.json', () => {
  it('is OpenAPI 3.1 and documents Link on every list and Location on every create', async () => {
    const res = await t.app.inject({ url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    const lists = ['/posts', '/users', '/tokens', '/posts/{postId}/comments', '/users/{userId}/posts'];
    for (const path of lists) expect(Object.keys(doc.paths[path].get.responses['200'].headers), path).toContain('Link');
    for (const path of ['/posts', '/users', '/posts/{postId}/comments'])
      expect(Object.keys(doc.paths[path].post.responses['201'].headers), path).toContain('Location');
    expect(Object.keys(doc.components.schemas)).toEqual(expect.arrayContaining(['Error', 'User', 'Post', 'Comment']));
  });
});
