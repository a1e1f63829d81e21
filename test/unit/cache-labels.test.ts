/** The response cache's labels: what a write names, what an entry shows; the NOTIFY payload that carries them. */
import { describe, expect, it } from 'vitest';
import { changeLabels, entryLabels, routeShape } from '../../src/cache/labels.js';
import { doorkeeper } from '../../src/cache/store.js';
import { fencePayload } from '../../src/cache/fence.js';

describe('changeLabels', () => {
  const post = { id: 7, authorId: 3, title: 't', commentCount: 2 };
  const comment = { id: 9, postId: 7, authorId: 4 };

  it('created: the item, its lists and what it references', () => {
    expect(changeLabels('created', 'posts', post)).toEqual(['posts/7', 'posts', 'users/3/posts', 'users/3']);
    expect(changeLabels('created', 'comments', comment)).toEqual([
      'comments/9',
      'comments',
      'posts/7/comments',
      'users/4/comments',
      'posts/7',
      'users/4',
    ]);
  });

  it('updated: the item and the lists ordered or filtered by mutable fields', () => {
    expect(changeLabels('updated', 'posts', post)).toEqual(['posts/7', 'posts#updated', 'users/3/posts#updated']);
  });

  it('deleted: as created, plus everything under the item', () => {
    expect(changeLabels('deleted', 'posts', post)).toEqual([
      'posts/7',
      'posts',
      'users/3/posts',
      'users/3',
      'posts/7/*',
    ]);
  });
});

describe('entryLabels', () => {
  const list = { data: [{ id: 1 }, { id: 2 }] };

  it('a single resource: itself and the parents it lives under, API prefix or not', () => {
    expect(entryLabels(routeShape('/posts/:postId'), { postId: '7' }, {}, { id: 7 })).toEqual(['posts/7']);
    expect(
      entryLabels(routeShape('/v1/posts/:postId/comments/:commentId'), { postId: '7', commentId: '9' }, {}, {}),
    ).toEqual(['posts/7/*', 'comments/9']);
  });

  it('a list: its scope (filters ignored), its items, and #updated when its order can change', () => {
    expect(entryLabels(routeShape('/posts'), {}, { author: 3, page: 2 }, list)).toEqual([
      'posts',
      'posts/1',
      'posts/2',
    ]);
    expect(entryLabels(routeShape('/users/:userId/posts'), { userId: '3' }, { sort: '-createdAt' }, list)).toEqual([
      'users/3/*',
      'users/3/posts',
      'posts/1',
      'posts/2',
    ]);
    expect(entryLabels(routeShape('/posts/:postId/comments'), { postId: '7' }, {}, { data: [] })).toEqual([
      'posts/7/*',
      'posts/7/comments',
    ]);
    expect(entryLabels(routeShape('/posts'), {}, { sort: '-updatedAt' }, { data: [] })).toEqual([
      'posts',
      'posts#updated',
    ]);
    expect(entryLabels(routeShape('/posts'), {}, { q: 'word' }, { data: [] })).toEqual(['posts', 'posts#updated']);
    // Creation times never change; fields and include only shape the items.
    const shaped = {
      createdAfter: '2026-01-01T00:00:00Z',
      createdBefore: '2026-02-01T00:00:00Z',
      fields: 'title',
      before: 4,
    };
    expect(entryLabels(routeShape('/posts'), {}, shaped, { data: [] })).toEqual(['posts']);
  });

  it('embedded authors: each once, on lists and single items, so a rename evicts them', () => {
    const embedded = {
      data: [
        { id: 1, author: { id: 3, name: 'a' } },
        { id: 2, author: { id: 3, name: 'a' } },
        { id: 5, author: { id: 4, name: 'b' } },
      ],
    };
    expect(entryLabels(routeShape('/posts'), {}, { include: 'author' }, embedded)).toEqual([
      'posts',
      'posts/1',
      'posts/2',
      'posts/5',
      'users/3',
      'users/4',
    ]);
    expect(
      entryLabels(
        routeShape('/posts/:postId'),
        { postId: '7' },
        { include: 'author' },
        { id: 7, author: { id: 3, name: 'a' } },
      ),
    ).toEqual(['posts/7', 'users/3']);
    expect(changeLabels('updated', 'users', { id: 3 })).toContain('users/3');
  });
});

describe('fencePayload', () => {
  it('the id and its labels; `*` (flush all) when they would not fit in a NOTIFY', () => {
    expect(fencePayload('a.1', new Set())).toBe('a.1');
    expect(fencePayload('a.1', new Set(['posts/1', 'posts']))).toBe('a.1 posts/1 posts');
    const many = new Set(Array.from({ length: 1_000 }, (_, i) => `posts/${i}`));
    expect(fencePayload('a.1', many)).toBe('a.1 *');
  });

  it('names the writers (~user id) before the labels, and keeps them when the labels become `*`', () => {
    expect(fencePayload('a.1', new Set(['posts/1']), new Set([7, 9]))).toBe('a.1 ~7 ~9 posts/1');
    const many = new Set(Array.from({ length: 1_000 }, (_, i) => `posts/${i}`));
    expect(fencePayload('a.1', many, new Set([7]))).toBe('a.1 ~7 *');
  });
});

describe('doorkeeper', () => {
  it('admits a URL missed again within the last half to whole of its slots, not later', () => {
    const seenBefore = doorkeeper(16);
    expect(seenBefore('/posts/1')).toBe(false);
    expect(seenBefore('/posts/1')).toBe(true);
    // Seven other misses: /posts/1 is in the older generation now, still remembered.
    for (let i = 2; i <= 8; i++) expect(seenBefore(`/posts/${i}`)).toBe(false);
    expect(seenBefore('/posts/1')).toBe(true);
    // Eight more: both generations turned over, so /posts/1 counts as new again.
    for (let i = 9; i <= 16; i++) seenBefore(`/posts/${i}`);
    expect(seenBefore('/posts/1')).toBe(false);
  });
});
