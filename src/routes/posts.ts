/** /posts and /users/{userId}/posts (docs/api.md §4, §5). */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses } from '../schemas/common.js';
import {
  PostBody,
  PostList,
  PostListQuery,
  PostParams,
  PostPatchBody,
  PostQuery,
  PostSchema,
  PostViewSchema,
  UserPostListQuery,
  UserPostsParams,
} from '../schemas/posts.js';
import { postsRepository, type PostChanges, type VersionedPost } from '../repositories/posts.js';

type PostsRepository = ReturnType<typeof postsRepository>;
import type { PostField } from '../schemas/posts.js';
import { readRepository } from '../plugins/read-routing.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { notFound } from '../errors.js';
import { listResponse, pageRequest, sortOf } from '../http/lists.js';
import { isFull, rangeOf, viewOf } from '../http/view-params.js';
import { changeOwned, type OwnershipRule } from '../use-cases/change-owned.js';
import { conditionalGet, postEtag, withEtag } from '../http/conditional.js';
import { createOnce } from '../use-cases/create-once.js';
import { Created, IdempotentHeaders } from '../schemas/idempotency.js';
import {
  ConditionalGetHeaders,
  ConditionalWriteHeaders,
  NotModified,
  WithEtag,
  listResponses,
} from '../schemas/conditional.js';

const Post = WithEtag(PostSchema, 'the post');
const PostView = WithEtag(
  PostViewSchema,
  "the post; with fields or include, that representation, whose ETag is a digest of it (If-Match takes the full one's)",
);
const secured = [{ bearerAuth: [] }];

const ownPost = (id: number): OwnershipRule<VersionedPost> => ({
  missing: `post ${id} does not exist`,
  owners: (post) => [post.authorId],
  denied: 'only its author or an admin may change this post',
});

type Api = Parameters<FastifyPluginAsyncTypebox>[0];

const postsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(PostSchema);
  app.addSchema(PostViewSchema);
  readRoutes(app);
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();
    createRoute(r);
    changeRoutes(r);
  });
};

/**
 * PATCH and PUT (`changes` may carry read-only members: only title and body
 * are read). A real change without If-Match, the common case, is one UPDATE
 * that writes only a post the user may change (its author's, or any for an
 * admin): changeOwned's direct path.
 */
async function changePost(
  posts: PostsRepository,
  request: FastifyRequest,
  reply: FastifyReply,
  id: number,
  changes: PostChanges,
) {
  const real = changes.title !== undefined || changes.body !== undefined;
  const post = await changeOwned<VersionedPost, VersionedPost>(request, {
    lock: (tx) => postsRepository(tx).lock(id, 'update'),
    rule: ownPost(id),
    etag: postEtag,
    write: async (tx, current) => (await postsRepository(tx).update(id, changes)) ?? current,
    direct: real
      ? { write: (ownerId) => posts.update(id, changes, ownerId), read: () => posts.findById(id) }
      : undefined,
  });
  return withEtag(reply, postEtag(post), post);
}

type PublicReads = (request: FastifyRequest) => PostsRepository;

function readRoutes(app: Api) {
  // Public reads may go to a replica (request.replica).
  const publicReads = readRepository((db) => postsRepository(db, app.db), app.db);
  listRoute(app, publicReads);
  getRoute(app, publicReads);
  userListRoute(app, publicReads);
}

function listRoute(app: Api, publicReads: PublicReads) {
  app.get(
    '/posts',
    {
      config: { readsReplica: true },
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
      const { query } = request;
      const page = pageRequest(query);
      const result = await publicReads(request).list(
        { author: query.author, q: query.q, ...rangeOf(query) },
        sortOf(query),
        page,
        viewOf(query),
      );
      if (!result) throw new Error('posts list has no parent');
      return listResponse(request, reply, result, page);
    },
  );
}

function userListRoute(app: Api, publicReads: PublicReads) {
  app.get(
    '/users/:userId/posts',
    {
      config: { readsReplica: true },
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
      const { query } = request;
      const userId = request.params.userId;
      const page = pageRequest(query);
      const result = await publicReads(request).listOfUser(
        userId,
        { q: query.q, ...rangeOf(query) },
        sortOf(query),
        page,
        viewOf(query),
      );
      if (!result) throw notFound(`user ${userId} does not exist`);
      return listResponse(request, reply, result, page);
    },
  );
}

function getRoute(app: Api, publicReads: PublicReads) {
  app.get(
    '/posts/:postId',
    {
      config: { readsReplica: true },
      schema: {
        tags: ['posts'],
        operationId: 'getPost',
        summary: 'One post',
        params: PostParams,
        querystring: PostQuery,
        headers: ConditionalGetHeaders,
        response: { 200: PostView, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const id = request.params.postId;
      const view = viewOf<PostField>(request.query);
      if (!isFull(view)) {
        // Its ETag is a digest of the body: it differs from the full post's and follows the author's name.
        const partial = await publicReads(request).read(id, view);
        if (!partial) throw notFound(`post ${id} does not exist`);
        return partial;
      }
      const post = await publicReads(request).findById(id);
      if (!post) throw notFound(`post ${id} does not exist`);
      return conditionalGet(request, reply, postEtag(post), post);
    },
  );
}

function createRoute(r: Api) {
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
        response: {
          201: Created(PostSchema, 'the new post'),
          ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 409),
        },
      },
    },
    async (request, reply) => {
      const { title, body } = request.body;
      return createOnce(request, reply, {
        kind: 'post',
        input: { title, body },
        create: async (db) => {
          const post = await postsRepository(db).create(request.user!.id, { title, body });
          return { id: post.id, etag: postEtag(post), body: post };
        },
      });
    },
  );
}

function changeRoutes(r: Api) {
  const posts = postsRepository(r.db);
  // PATCH and PUT differ only in their body's contract (all fields optional, or all required).
  const change = {
    tags: ['posts'],
    security: secured,
    params: PostParams,
    headers: ConditionalWriteHeaders,
    response: { 200: Post, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
  };

  r.patch(
    '/posts/:postId',
    {
      schema: {
        ...change,
        operationId: 'updatePost',
        summary: 'Change a post (its author or an admin)',
        description: 'Only the given fields change. Also accepts application/merge-patch+json.',
        body: PostPatchBody,
      },
    },
    async (request, reply) => changePost(posts, request, reply, request.params.postId, request.body),
  );

  r.put(
    '/posts/:postId',
    {
      schema: {
        ...change,
        operationId: 'replacePost',
        summary: 'Replace a post (its author or an admin)',
        description: 'title and body are both required; read-only members are ignored.',
        body: PostBody,
      },
    },
    async (request, reply) => changePost(posts, request, reply, request.params.postId, request.body),
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
      await changeOwned<VersionedPost, void>(request, {
        lock: (tx) => postsRepository(tx).lock(id, 'delete'),
        rule: ownPost(id),
        etag: postEtag,
        write: async (tx) => {
          await postsRepository(tx).delete(id);
        },
      });
      return reply.code(204).send(null);
    },
  );
}

export default postsRoutes;
