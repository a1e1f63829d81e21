/** /posts and /users/{userId}/posts (docs/api.md §4, §5). */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses } from '../schemas/common.js';
import {
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
import { retryingConflicts, withTransaction } from '../db/pool.js';
import { listResponse, pageRequest, sortOf } from '../http/lists.js';
import { loadOwned, type OwnershipRule } from '../http/ownership.js';
import { conditionalGet, postTag, requireMatch, tagged } from '../http/conditional.js';
import { Created, IdempotentHeaders, createOnce } from '../http/idempotency.js';
import {
  ConditionalGetHeaders,
  ConditionalWriteHeaders,
  NotModified,
  Tagged,
  listResponses,
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
      const updated = await retryingConflicts(() => posts.update(id, changes, user.role === 'admin' ? undefined : user.id));
      if (updated) {
        request.changed('updated', 'posts', updated);
        return updated;
      }
      // Nothing written: a missing post (404), another author's (403), or one already as asked.
      return loadOwned(posts.findById(id), user, ownPost(id));
    }
    return withTransaction(app.db, async (tx) => {
      const repo = postsRepository(tx);
      const current = await loadOwned(repo.lock(id, 'update'), user, ownPost(id));
      requireMatch(request, postTag(current));
      const updated = await repo.update(id, changes);
      if (!updated) return current;
      request.changed('updated', 'posts', updated);
      return updated;
    });
  }

  app.get(
    '/posts',
    {
      config: { cached: true },
      schema: {
        tags: ['posts'],
        operationId: 'listPosts',
        summary: 'List posts',
        querystring: PostListQuery,
        headers: ConditionalGetHeaders,
        response: listResponses(PostList),
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
        operationId: 'getPost',
        summary: 'One post',
        params: PostParams,
        headers: ConditionalGetHeaders,
        response: { 200: Post, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const id = request.params.postId;
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
        operationId: 'listUserPosts',
        summary: 'The posts of one author',
        params: UserPostsParams,
        querystring: UserPostListQuery,
        headers: ConditionalGetHeaders,
        response: listResponses(PostList, 404),
      },
    },
    async (request, reply) => {
      const userId = request.params.userId;
      const page = pageRequest(request.query);
      const result = await posts.listOfUser(userId, sortOf(request.query), page);
      if (!result) throw notFound(`user ${userId} does not exist`);
      return listResponse(request, reply, result, page);
    },
  );

  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();

    r.post(
      '/posts',
      {
        schema: {
          tags: ['posts'],
          operationId: 'createPost',
          summary: 'Write a post',
          security: secured,
          headers: IdempotentHeaders,
          body: PostBody,
          response: { 201: Created(PostSchema, 'the new post'), ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 409) },
        },
      },
      async (request, reply) => {
        const { title, body } = request.body;
        return createOnce(request, reply, {
          kind: 'post',
          input: { title, body },
          create: async (db) => {
            const post = await postsRepository(db).create(request.user!.id, { title, body });
            request.changed('created', 'posts', post);
            return { id: post.id, etag: postTag(post), body: post };
          },
        });
      },
    );

    r.patch(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          operationId: 'updatePost',
          summary: 'Change a post (its author or an admin)',
          description: 'Only the given fields change. Also accepts application/merge-patch+json.',
          security: secured,
          params: PostParams,
          headers: ConditionalWriteHeaders,
          body: PostPatchBody,
          response: { 200: Post, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
        },
      },
      async (request, reply) => {
        const { title, body } = request.body;
        const post = await changePost(request, request.params.postId, { title, body });
        return tagged(reply, postTag(post), post);
      },
    );

    r.put(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          operationId: 'replacePost',
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
        const post = await changePost(request, request.params.postId, { title, body });
        return tagged(reply, postTag(post), post);
      },
    );

    r.delete(
      '/posts/:postId',
      {
        schema: {
          tags: ['posts'],
          operationId: 'deletePost',
          summary: 'Delete a post and its comments (its author or an admin)',
          security: secured,
          params: PostParams,
          headers: ConditionalWriteHeaders,
          response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404, 412) },
        },
      },
      async (request, reply) => {
        const id = request.params.postId;
        await withTransaction(app.db, async (tx) => {
          const repo = postsRepository(tx);
          const current = await loadOwned(repo.lock(id, 'delete'), request.user!, ownPost(id));
          requireMatch(request, postTag(current));
          await repo.delete(id);
          request.changed('deleted', 'posts', current);
        });
        return reply.code(204).send(null);
      },
    );
  });
};

export default postsRoutes;
