/** /posts and /users/{userId}/posts (docs/api.md §4, §5). */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BODY_ERRORS, COMMON_ERRORS, errorResponses } from '../schemas/common.js';
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
  type PostField,
} from '../schemas/posts.js';
import { postsRepository, type PostChanges, type VersionedPost } from '../repositories/posts.js';
import type { View } from '../db/views.js';
import { readRepository } from '../plugins/read-routing.js';
import { sortOf } from '../http/lists.js';
import { rangeOf, viewOf } from '../http/view-params.js';
import { changeOwned, type OwnershipRule } from '../use-cases/change-owned.js';
import { postEtag, withEtag } from '../http/conditional.js';
import { ConditionalWriteHeaders, WithEtag } from '../schemas/conditional.js';
import { Created, createRoute, deleteRoute, itemRoute, listRoute, secured, type Api } from './resource-routes.js';

type PostsRepository = ReturnType<typeof postsRepository>;
const tags = ['posts'];
const Post = WithEtag(PostSchema, 'the post');
const PostView = WithEtag(
  PostViewSchema,
  "the post; with fields or include, that representation, whose ETag is a digest of it (If-Match takes the full one's)",
);

const ownPost = (id: number): OwnershipRule<VersionedPost> => ({
  missing: `post ${id} does not exist`,
  owners: (post) => [post.authorId],
  denied: 'only its author or an admin may change this post',
});

const postsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(PostSchema);
  app.addSchema(PostViewSchema);
  readRoutes(app);
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();
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

function readRoutes(app: Api) {
  // Public reads may go to a replica (request.replica).
  const publicReads = readRepository((db) => postsRepository(db, app.db), app.db);
  listRoute(app, '/posts', {
    tags,
    operationId: 'listPosts',
    summary: 'List posts',
    querystring: PostListQuery,
    list: PostList,
    load: (request, page) => {
      const { query } = request;
      return publicReads(request).list(
        { author: query.author, q: query.q, ...rangeOf(query) },
        sortOf(query),
        page,
        viewOf(query),
      );
    },
  });
  listRoute(app, '/users/:userId/posts', {
    tags,
    operationId: 'listUserPosts',
    summary: 'The posts of one author',
    params: UserPostsParams,
    querystring: UserPostListQuery,
    list: PostList,
    load: (request, page) => {
      const { params, query } = request;
      return publicReads(request).listOfUser(
        params.userId,
        { q: query.q, ...rangeOf(query) },
        sortOf(query),
        page,
        viewOf(query),
      );
    },
    missing: ({ userId }) => `user ${userId} does not exist`,
  });
  itemRoute(app, '/posts/:postId', {
    tags,
    operationId: 'getPost',
    summary: 'One post',
    params: PostParams,
    querystring: PostQuery,
    item: PostView,
    find: (request) => publicReads(request).findById(request.params.postId),
    read: (request, view: View<PostField>) => publicReads(request).read(request.params.postId, view),
    etag: postEtag,
    missing: ({ postId }) => `post ${postId} does not exist`,
  });
}

function changeRoutes(r: Api) {
  const posts = postsRepository(r.db);
  createRoute(r, '/posts', {
    tags,
    operationId: 'createPost',
    summary: 'Write a post',
    body: PostBody,
    created: Created(PostSchema, 'the new post'),
    errors: [409],
    kind: 'post',
    input: ({ title, body }) => ({ title, body }),
    create: async (db, { body: { title, body }, user }) => {
      const post = await postsRepository(db).create(user!.id, { title, body });
      return { id: post.id, etag: postEtag(post), body: post };
    },
  });
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

  deleteRoute(r, '/posts/:postId', {
    tags,
    operationId: 'deletePost',
    summary: 'Delete a post and its comments (its author or an admin)',
    params: PostParams,
    lock: (tx, { postId }) => postsRepository(tx).lock(postId, 'delete'),
    rule: ({ postId }) => ownPost(postId),
    etag: postEtag,
    remove: (tx, { postId }) => postsRepository(tx).delete(postId),
  });
}

export default postsRoutes;
