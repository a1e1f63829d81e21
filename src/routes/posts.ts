/** The post resource: its declaration, and /posts and /users/{userId}/posts (docs/api.md §4, §5). */
import { BODY_ERRORS, COMMON_ERRORS, errorResponses, secured } from '../schemas/common.js';
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
  type PostSortField,
} from '../schemas/posts.js';
import { postsRepository, type VersionedPost } from '../repositories/posts.js';
import type { View } from '../db/views.js';
import { readRepository } from '../plugins/read-routing.js';
import type { ListRequest } from '../http/lists.js';
import { changeOwned } from '../use-cases/change-owned.js';
import { withEtag } from '../http/conditional.js';
import { ConditionalWriteHeaders, WithEtag } from '../schemas/conditional.js';
import { missing, type Resource } from '../resource.js';
import {
  Created,
  authenticated,
  createRoute,
  deleteRoute,
  groupOf,
  itemRoute,
  listRoute,
  type Api,
} from './resource-routes.js';

/** A post's version changes with each edit; its comment count is part of what a GET shows. */
export const postEtag = (post: { id: number; version: number; commentCount: number }): string =>
  `"p${post.id}-${post.version}-${post.commentCount}"`;

export const posts: Resource<VersionedPost> = {
  name: 'post',
  path: '/posts/:postId',
  schema: PostSchema,
  group: { name: 'posts', description: 'posts, their lists, and the posts of one author' },
  etag: postEtag,
  tombstones: 'deleted_posts',
  routes: async (app) => {
    app.addSchema(PostViewSchema);
    readRoutes(app);
    await authenticated(app, changeRoutes);
  },
};

const Post = WithEtag(PostSchema, 'the post');
const PostView = WithEtag(
  PostViewSchema,
  "the post; with fields or include, that representation, whose ETag is a digest of it (If-Match takes the full one's)",
);

const owners = (post: VersionedPost): number[] => [post.authorId];
const denied = 'only its author or an admin may change this post';

function readRoutes(app: Api): void {
  const publicReads = readRepository((db) => postsRepository(db, app.db), app.db);
  listRoute(app, posts, '/posts', {
    operationId: 'listPosts',
    summary: 'List posts',
    querystring: PostListQuery,
    list: PostList,
    load: (request, { filter, sort, page, view }: ListRequest<PostSortField, PostField>) =>
      publicReads(request).list(filter, sort, page, view),
  });
  listRoute(app, posts, '/users/:userId/posts', {
    operationId: 'listUserPosts',
    summary: 'The posts of one author',
    params: UserPostsParams,
    querystring: UserPostListQuery,
    list: PostList,
    load: (request, { filter, sort, page, view }: ListRequest<PostSortField, PostField>) =>
      publicReads(request).listOfUser(request.params.userId, filter, sort, page, view),
    // Its 404 names the user: what this list lives under is not the post's parent.
    under: { name: 'user', path: '/users/:userId' },
  });
  itemRoute(app, posts, {
    operationId: 'getPost',
    summary: 'One post',
    params: PostParams,
    querystring: PostQuery,
    item: PostView,
    find: (request) => publicReads(request).findById(request.params.postId),
    read: (request, view: View<PostField>) => publicReads(request).read(request.params.postId, view),
  });
}

function changeRoutes(r: Api): void {
  const direct = postsRepository(r.db);
  createRoute(r, posts, '/posts', {
    operationId: 'createPost',
    summary: 'Write a post',
    body: PostBody,
    created: Created(PostSchema, 'the new post'),
    // 404: its author deleted (by SQL) while an instance still trusts the token.
    errors: [404, 409],
    input: ({ title, body }) => ({ title, body }),
    create: async (db, { body: { title, body }, user }) => {
      const post = await postsRepository(db).create(user!.id, { title, body });
      return { id: post.id, etag: postEtag(post), body: post };
    },
  });
  // PATCH and PUT differ only in their body's contract (all fields optional, or all required).
  const patch = 'Only the given fields change. Also accepts application/merge-patch+json.';
  const put = 'title and body are both required; read-only members are ignored.';
  for (const [method, operationId, verb, description, body] of [
    ['PATCH', 'updatePost', 'Change', patch, PostPatchBody],
    ['PUT', 'replacePost', 'Replace', put, PostBody],
  ] as const)
    r.route({
      method,
      url: '/posts/:postId',
      schema: {
        tags: groupOf(posts),
        security: secured,
        params: PostParams,
        headers: ConditionalWriteHeaders,
        response: { 200: Post, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
        operationId,
        summary: `${verb} a post (its author or an admin)`,
        description,
        body,
      },
      // One UPDATE, when there is no If-Match and a real change, writes only a post this user may change.
      handler: async (request, reply) => {
        const id = request.params.postId;
        const changes = { title: request.body.title, body: request.body.body };
        const post = await changeOwned<VersionedPost, VersionedPost>(request, {
          lock: (tx) => postsRepository(tx).lock(id, 'update'),
          rule: { missing: missing(posts, request.params), owners, denied },
          etag: postEtag,
          write: async (tx, current) => (await postsRepository(tx).update(id, changes)) ?? current,
          direct:
            changes.title !== undefined || changes.body !== undefined
              ? { write: (ownerId) => direct.update(id, changes, ownerId), read: () => direct.findById(id) }
              : undefined,
        });
        return withEtag(reply, postEtag(post), post);
      },
    });

  deleteRoute(r, posts, {
    operationId: 'deletePost',
    summary: 'Delete a post and its comments (its author or an admin)',
    params: PostParams,
    lock: (tx, { postId }) => postsRepository(tx).lock(postId, 'delete'),
    owners,
    denied,
    remove: (tx, { postId }) => postsRepository(tx).delete(postId),
  });
}
