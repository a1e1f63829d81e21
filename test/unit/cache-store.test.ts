/** The response cache's store (src/cache/store.ts) and the change bus's payload parsing (src/cache/fence.ts), without a database. */
import { describe, expect, it } from 'vitest';
import { createResponseStore } from '../../src/cache/store.js';
import { parseFence } from '../../src/cache/fence.js';

const answer = (labels: string[], body = '{}') => ({ body: Buffer.from(body), headers: { etag: '"x"' }, labels });

describe('createResponseStore', () => {
  it('evicts the answers sharing a label, and only those', () => {
    const store = createResponseStore({ maxBytes: 1 << 20, maxAgeMs: 60_000 });
    store.put('/posts/1', answer(['posts/1']));
    store.put('/posts', answer(['posts', 'posts/1', 'posts/2']));
    store.put('/posts/2', answer(['posts/2']));
    store.evict(['posts/1']);
    expect(store.get('/posts/1')).toBeUndefined();
    expect(store.get('/posts')).toBeUndefined();
    expect(store.get('/posts/2')).toEqual(answer(['posts/2']));
  });

  it('flushes everything for null or `*`', () => {
    const store = createResponseStore({ maxBytes: 1 << 20, maxAgeMs: 60_000 });
    store.put('/posts/1', answer(['posts/1']));
    store.evict(null);
    expect(store.get('/posts/1')).toBeUndefined();
    store.put('/posts/2', answer(['posts/2']));
    store.evict(['*']);
    expect(store.get('/posts/2')).toBeUndefined();
  });

  it('tells a miss whether an eviction since it started touched its labels', () => {
    const store = createResponseStore({ maxBytes: 1 << 20, maxAgeMs: 60_000 });
    const since = store.epoch();
    expect(store.evictedSince(since, ['posts/1'])).toBe(false);
    store.evict(['posts/2']);
    expect(store.evictedSince(since, ['posts/1'])).toBe(false);
    store.evict(['posts/1']);
    expect(store.evictedSince(since, ['posts/1'])).toBe(true);
    expect(store.evictedSince(store.epoch(), ['posts/1'])).toBe(false);
  });

  it('refuses an answer over an eighth of the budget', () => {
    const store = createResponseStore({ maxBytes: 16_000, maxAgeMs: 60_000 });
    store.put('/big', answer(['posts'], 'x'.repeat(3_000)));
    expect(store.get('/big')).toBeUndefined();
    store.put('/small', answer(['posts'], 'x'.repeat(100)));
    expect(store.get('/small')).toBeDefined();
  });
});

describe('parseFence', () => {
  it('reads the sender, writers, position and labels of a change', () => {
    expect(parseFence('abc.7 ~3 ~4 posts/1 posts !0/3000148')).toEqual({
      id: 'abc.7',
      sender: 'abc',
      writers: ['3', '4'],
      position: 0x3000148,
      words: ['posts/1', 'posts'],
    });
  });

  it('reads a heartbeat, a confirmation and an unconfirmed change', () => {
    expect(parseFence('abc.8')).toMatchObject({ sender: 'abc', words: [], position: undefined });
    expect(parseFence('def.2 @abc.7')).toMatchObject({ sender: 'def', words: ['@abc.7'] });
    expect(parseFence('ghi.3~ posts/1')).toMatchObject({ id: 'ghi.3~', sender: 'ghi', words: ['posts/1'] });
  });
});
