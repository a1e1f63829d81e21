/** /posts and /users/{userId}/posts (API.md §4, §5). */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses } from '../schemas/common.js';
import {
  PATCH_MEDIA_TYPES,
  PostBody,
  PostList,
  PostListQuery,
  PostParams,
  PostPatchBody,
  PostSchema,
  UserPostListQuery,
  UserPostsParams,
} from '../schemas/posts.js';
import { postsRepository, type PostChanges, type VersionedPost } from '../repositories/posts.js';
import type { FastifyRequest } from 'fastify';
import { notFound } from '../errors.js';
import { withTransaction } from '../db/pool.js';
import { listResponse, pageRequest, sortOf } from './lists.js';
import { loadOwned, type OwnershipRule } from './ownership.js';
import { conditionalGet, postTag, requireMatch, tagged } from './conditional.js';
import { createOnce } from './idempotency.js';
import {
  ConditionalGetHeaders,
  ConditionalWriteHeaders,
  Created,
  IdempotentHeaders,
  NotModified,
  Tagged,
} from '../schemas/conditional.js';

const Post = Tagged(PostSchema, 'the post');
const secured = [{ bearerAuth: [] }];

const ownPost = (id: number): OwnershipRule<VersionedPost> => ({
  missing: `post ${id} does not exist`,
  owners: (post) => [post.authorId],
  denied: 'only its author or an admin may change this post',
});

const postsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const posts = postsRepository(app.db);

  /**
   * PATCH and PUT: check (ownership, If-Match) and write under one row lock.
   * The common case, a real change without If-Match, is one statement (no
   * transaction, one round trip instead of four): the UPDATE itself locks the
   * row and writes only a post the user may change (its author's, or any for an
   * admin). When it writes nothing, the read after it tells 404 from 403 by the
   * ownership rule.
   */
  async function changePost(request: FastifyRequest, id: number, changes: PostChanges): Promise<VersionedPost> {
    const user = request.user!;
    const real = changes.title !== undefined || changes.body !== undefined;
    if (real && request.headers['if-match'] === undefined) {
      const updated = await posts.update(id, changes, user.role === 'admin' ? undefined : user.id);
      if (updated) return updated;
      // Throws 404 or 403; if neither applies now (a post committed meanwhile), the locked path below decides.
      await loadOwned(posts.findById(id), user, ownPost(id));
    }
    return withTransaction(app.db, async (tx) => {
      const repo = postsRepository(tx);
      const current = await loadOwned(repo.lock(id, 'update'), request.user!, ownPost(id));
      requireMatch(request, postTag(current));
      return (await repo.update(id, changes))!;
    });
  }

  app.get(
    '/posts',
    {
      config: { cached: true },
      schema: {
        tags: ['posts'],
        summary: 'List posts',
        querystring: PostListQuery,
        response: { 200: PostList, ...errorResponses(...COMMON_ERRORS, 422) },
      },
    },
    async (request, reply) => {
      const page = pageRequest(request.query);
      const result = await posts.list(request.query.author, sortOf(request.query), page);
      if (!result) throw new Error('posts list has no parent');
      return listResponse(request, reply, result, page);
    },
  );

  app.get(
    '/posts/:postId',
    {
      config: { cached: true },
      schema: {
        tags: ['posts'],
        summary: 'One post',
        params: PostParams,
        headers: ConditionalGetHeaders,
        response: { 200: Post, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const id = Number(request.params.postId);
      const post = await posts.findById(id);
      if (!post) throw notFound(`post ${id} does not exist`);
      return conditionalGet(request, reply, postTag(post), post);
    },
  );

  app.get(
    '/users/:userId/posts',
    {
      config: { cached: true },
      schema: {
        tags: ['posts'],
        summary: 'The posts of one author',
        params: UserPostsParams,
        querystring: UserPostListQuery,
        response: { 200: PostList, ...errorResponses(...COMMON_ERRORS, 404, 422) },
      },
    },
    async (request, reply) => {
      const userId = Number(request.params.userId);
      const page = pageRequest(request.query);
      const result = await posts.listOfUser(userId, sortOf(request.query), page);
      if (!result) throw notFound(`user ${userId} does not exist`);
      return listResponse(request, reply, result, page);
    },
  );

  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    app.responseCache.trackWrites(authed);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();

    r.post(
      '/posts',
      {
        schema: {
          tags: ['posts'],
          summary: 'Write a post',
          security: secured,
          headers: IdempotentHeaders,
          body: PostBody,
          response: { 201: Created(PostSchema, 'the new post'), ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 409) },
        },
      },
      async (request, reply) => {
        const { title, body } = request.body;
        return createOnce(request, reply, async (db) => {
          const post = await postsRepository(db).create(request.user!.id, { title, body });
          return { id: post.id, etag: postTag(post), body: post };
        });
      },
    );

    r.patch(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          summary: 'Change a post (its author or an admin)',
          description: 'Only the given fields change. Also accepts application/merge-patch+json.',
          security: secured,
          consumes: PATCH_MEDIA_TYPES,
          params: PostParams,
          headers: ConditionalWriteHeaders,
          body: PostPatchBody,
          response: { 200: Post, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
        },
      },
      async (request, reply) => {
        const { title, body } = request.body;
        const post = await changePost(request, Number(request.params.postId), { title, body });
        return tagged(reply, postTag(post), post);
      },
    );

    r.put(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          summary: 'Replace a post (its author or an admin)',
          description: 'title and body are both required; read-only members are ignored.',
          security: secured,
          params: PostParams,
          headers: ConditionalWriteHeaders,
          body: PostBody,
          response: { 200: Post, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
        },
      },
      async (request, reply) => {
        const { title, body } = request.body;
        const post = await changePost(request, Number(request.params.postId), { title, body });
        return tagged(reply, postTag(post), post);
      },
    );

    r.delete(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          summary: 'Delete a post and its comments (its author or an admin)',
          security: secured,
          params: PostParams,
          headers: ConditionalWriteHeaders,
          response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404, 412) },
        },
      },
      async (request, reply) => {
        const id = Number(request.params.postId);
        await withTransaction(app.db, async (tx) => {
          const repo = postsRepository(tx);
          const current = await loadOwned(repo.lock(id, 'delete'), request.user!, ownPost(id));
          requireMatch(request, postTag(current));
          await repo.delete(id);
        });
        return reply.code(204).send(null);
      },
    );
  });
};

export default postsRoutes;
