/**
 * The resource registry (src/resource.ts): what it derives from the declarations, and the declarations it refuses
 * at start-up rather than serving wrongly (events carry one post id; a parent comes first).
 */
import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { CORE_RESOURCES } from '../../src/app.js';
import { missing, resourceRegistry, type Resource } from '../../src/resource.js';
import { posts } from '../../src/routes/posts.js';
import { users } from '../../src/routes/users.js';
import { emailTaken } from '../../src/errors.js';
import { Id } from '../../src/schemas/common.js';

const declare = (facts: Partial<Resource<never>> & Pick<Resource<never>, 'name' | 'path'>): Resource<never> => ({
  schema: Type.Object({ id: Id }, { $id: facts.name }),
  group: { name: facts.name, description: facts.name },
  etag: () => '"x"',
  routes: async () => undefined,
  ...facts,
});

describe('what the core declarations give', () => {
  const registry = resourceRegistry(CORE_RESOURCES, '/v1');

  it('three event types per resource, in declaration order', () => {
    expect(registry.eventTypes).toEqual([
      'post.created',
      'post.updated',
      'post.deleted',
      'comment.created',
      'comment.updated',
      'comment.deleted',
      'user.created',
      'user.updated',
      'user.deleted',
    ]);
  });

  it("an event's path, prefix included, under its post when it has one", () => {
    expect(registry.eventPath('post', 7, 7)).toBe('/v1/posts/7');
    expect(registry.eventPath('comment', 3, 7)).toBe('/v1/posts/7/comments/3');
    expect(registry.eventPath('user', 5, null)).toBe('/v1/users/5');
    // Written by a newer instance that serves a resource this one does not: its type still names it.
    expect(registry.eventPath('badge', 2, null)).toBe('/v1/badge/2');
  });

  it('tombstone tables and unique conflicts', () => {
    expect(registry.tombstoneTables).toEqual(['deleted_posts', 'deleted_comments']);
    expect(registry.uniqueViolation('users_email_key')).toEqual(emailTaken());
    expect(registry.uniqueViolation('tokens_token_hash_key')).toBeUndefined();
  });

  it("404 messages from a request's path parameters", () => {
    const [, comments] = CORE_RESOURCES;
    expect(missing(posts, { postId: 7 })).toBe('post 7 does not exist');
    expect(missing(comments!, { postId: 7, commentId: 3 })).toBe('comment 3 of post 7 does not exist');
    expect(missing(users, { userId: 5 })).toBe('user 5 does not exist');
  });
});

describe('declarations refused at start-up', () => {
  const refused = (resources: Resource<never>[]) => () => resourceRegistry([...CORE_RESOURCES, ...resources], '');

  it('a name that could not name an event, or one declared twice', () => {
    expect(refused([declare({ name: 'Tag', path: '/tags/:tagId' })])).toThrow(/must be lower case/);
    expect(refused([declare({ name: 'post', path: '/other/:otherId' })])).toThrow('resource "post" is declared twice');
  });

  it('a parent that is not posts, not declared before, or a path not under it', () => {
    expect(refused([declare({ name: 'key', path: '/users/:userId/keys/:keyId', parent: users })])).toThrow(
      'key: only posts have resources under them (events.post_id)',
    );
    const early = declare({ name: 'tag', path: '/posts/:postId/tags/:tagId', parent: posts });
    expect(() => resourceRegistry([early, ...CORE_RESOURCES], '')).toThrow(
      'tag: its parent post must be declared before it',
    );
    expect(refused([declare({ name: 'tag', path: '/tags/:tagId', parent: posts })])).toThrow(
      'tag: its path must be one level under /posts/:postId (/tags/:tagId)',
    );
  });

  it('a top-level path naming more than its own id', () => {
    expect(refused([declare({ name: 'tag', path: '/groups/:groupId/tags/:tagId' })])).toThrow(
      'tag: a top-level path has one parameter (/groups/:groupId/tags/:tagId)',
    );
  });

  it('a declaration that follows the rules is taken', () => {
    const tags = declare({
      name: 'tag',
      path: '/posts/:postId/tags/:tagId',
      parent: posts,
      tombstones: 'deleted_tags',
    });
    const registry = resourceRegistry([...CORE_RESOURCES, tags], '');
    expect(registry.eventTypes).toContain('tag.deleted');
    expect(registry.eventPath('tag', 4, 9)).toBe('/posts/9/tags/4');
    expect(registry.tombstoneTables).toContain('deleted_tags');
  });
});
