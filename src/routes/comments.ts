/** The comment resource: its declaration, and /posts/{postId}/comments (docs/api.md §4, §5). */
import { BODY_ERRORS, COMMON_ERRORS, errorResponses, secured } from '../schemas/common.js';
import {
  CommentBody,
  CommentList,
  CommentListQuery,
  CommentParams,
  CommentPatchBody,
  CommentQuery,
  CommentSchema,
  CommentViewSchema,
  type CommentField,
  type CommentSortField,
} from '../schemas/comments.js';
import { PostParams } from '../schemas/posts.js';
import { commentsRepository, type VersionedComment } from '../repositories/comments.js';
import { readRepository } from '../plugins/read-routing.js';
import type { View } from '../db/views.js';
import { notFound } from '../errors.js';
import type { ListRequest } from '../http/lists.js';
import { changeOwned } from '../use-cases/change-owned.js';
import { withEtag } from '../http/conditional.js';
import { ConditionalWriteHeaders, WithEtag } from '../schemas/conditional.js';
import { missing, type Resource } from '../resource.js';
import { posts } from './posts.js';
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

export const commentEtag = (comment: { id: number; version: number }): string => `"c${comment.id}-${comment.version}"`;

export const comments: Resource<VersionedComment> = {
  name: 'comment',
  path: '/posts/:postId/comments/:commentId',
  parent: posts,
  schema: CommentSchema,
  group: { name: 'comments', description: 'comments, which exist only under their post' },
  etag: commentEtag,
  tombstones: 'deleted_comments',
  routes: async (app) => {
    app.addSchema(CommentViewSchema);
    readRoutes(app);
    await authenticated(app, writeRoutes);
  },
};

function readRoutes(app: Api): void {
  const publicReads = readRepository(commentsRepository, app.db);
  listRoute(app, comments, '/posts/:postId/comments', {
    operationId: 'listComments',
    summary: 'List the comments of a post',
    params: PostParams,
    querystring: CommentListQuery,
    list: CommentList,
    load: (request, { filter, sort, page, view }: ListRequest<CommentSortField, CommentField>) =>
      publicReads(request).list({ ...filter, postId: request.params.postId }, sort, page, view),
  });
  itemRoute(app, comments, {
    operationId: 'getComment',
    summary: 'One comment of a post',
    params: CommentParams,
    querystring: CommentQuery,
    item: WithEtag(
      CommentViewSchema,
      "the comment; with fields or include, that representation, whose ETag is a digest of it (If-Match takes the full one's)",
    ),
    find: (request) => publicReads(request).find(request.params.postId, request.params.commentId),
    read: (request, view: View<CommentField>) =>
      publicReads(request).read(request.params.postId, request.params.commentId, view),
  });
}

function writeRoutes(r: Api): void {
  createRoute(r, comments, '/posts/:postId/comments', {
    operationId: 'createComment',
    summary: 'Comment on a post',
    params: PostParams,
    body: CommentBody,
    created: Created(CommentSchema, 'the new comment'),
    errors: [404, 409],
    input: ({ body }) => ({ body }),
    create: async (db, { params: { postId }, body: { body }, user }) => {
      const comment = await commentsRepository(db).create(postId, user!.id, body);
      if (!comment) throw notFound(missing(posts, { postId }));
      return { id: comment.id, etag: commentEtag(comment), body: comment };
    },
  });

  r.patch(
    comments.path,
    {
      schema: {
        tags: groupOf(comments),
        operationId: 'updateComment',
        summary: 'Change a comment (its author or an admin)',
        description: 'Only the given fields change. Also accepts application/merge-patch+json.',
        security: secured,
        params: CommentParams,
        headers: ConditionalWriteHeaders,
        body: CommentPatchBody,
        response: {
          200: WithEtag(CommentSchema, 'the comment'),
          ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412),
        },
      },
    },
    async (request, reply) => {
      const { postId, commentId } = request.params;
      const comment = await changeOwned<VersionedComment, VersionedComment>(request, {
        lock: (tx) => commentsRepository(tx).lockForUpdate(postId, commentId),
        rule: {
          missing: missing(comments, request.params),
          owners: (comment) => [comment.authorId],
          denied: 'only its author or an admin may change this comment',
        },
        etag: commentEtag,
        write: async (tx) => (await commentsRepository(tx).update(postId, commentId, { body: request.body.body }))!,
      });
      return withEtag(reply, commentEtag(comment), comment);
    },
  );

  deleteRoute(r, comments, {
    operationId: 'deleteComment',
    summary: "Delete a comment (its author, the post's author or an admin)",
    params: CommentParams,
    lock: (tx, { postId, commentId }) => commentsRepository(tx).lockForDelete(postId, commentId),
    owners: (comment) => [comment.authorId, comment.postAuthorId],
    denied: "only its author, the post's author or an admin may delete this comment",
    remove: (tx, { postId, commentId }) => commentsRepository(tx).delete(postId, commentId),
  });
}
