/** /posts/{postId}/comments (docs/api.md §4, §5): comments exist only under their post. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
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
} from '../schemas/comments.js';
import { PostParams } from '../schemas/posts.js';
import { commentsRepository, type VersionedComment } from '../repositories/comments.js';
import { readRepository } from '../plugins/read-routing.js';
import type { View } from '../db/views.js';
import { notFound } from '../errors.js';
import { sortOf } from '../http/lists.js';
import { rangeOf, viewOf } from '../http/view-params.js';
import { changeOwned } from '../use-cases/change-owned.js';
import { commentEtag, withEtag } from '../http/conditional.js';
import { ConditionalWriteHeaders, WithEtag } from '../schemas/conditional.js';
import { Created, authenticated, createRoute, deleteRoute, itemRoute, listRoute, type Api } from './resource-routes.js';

const missingComment = ({ postId, commentId }: { postId: number; commentId: number }) =>
  `comment ${commentId} of post ${postId} does not exist`;
const tags = ['comments'];

const commentsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(CommentSchema);
  app.addSchema(CommentViewSchema);
  const publicReads = readRepository(commentsRepository, app.db);

  listRoute(app, '/posts/:postId/comments', {
    tags,
    operationId: 'listComments',
    summary: 'List the comments of a post',
    params: PostParams,
    querystring: CommentListQuery,
    list: CommentList,
    load: (request, page) => {
      const { params, query } = request;
      const filter = { postId: params.postId, author: query.author, ...rangeOf(query) };
      return publicReads(request).list(filter, sortOf(query), page, viewOf(query));
    },
    missing: ({ postId }) => `post ${postId} does not exist`,
  });

  itemRoute(app, '/posts/:postId/comments/:commentId', {
    tags,
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
    etag: commentEtag,
    missing: missingComment,
  });

  await authenticated(app, writeRoutes);
};

function writeRoutes(r: Api) {
  createRoute(r, '/posts/:postId/comments', {
    tags,
    operationId: 'createComment',
    summary: 'Comment on a post',
    params: PostParams,
    body: CommentBody,
    created: Created(CommentSchema, 'the new comment'),
    errors: [404, 409],
    kind: 'comment',
    input: ({ body }) => ({ body }),
    create: async (db, { params: { postId }, body: { body }, user }) => {
      const comment = await commentsRepository(db).create(postId, user!.id, body);
      if (!comment) throw notFound(`post ${postId} does not exist`);
      return { id: comment.id, etag: commentEtag(comment), body: comment };
    },
  });

  r.patch(
    '/posts/:postId/comments/:commentId',
    {
      schema: {
        tags,
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
          missing: missingComment(request.params),
          owners: (comment) => [comment.authorId],
          denied: 'only its author or an admin may change this comment',
        },
        etag: commentEtag,
        write: async (tx) => (await commentsRepository(tx).update(postId, commentId, { body: request.body.body }))!,
      });
      return withEtag(reply, commentEtag(comment), comment);
    },
  );

  deleteRoute(r, '/posts/:postId/comments/:commentId', {
    tags,
    operationId: 'deleteComment',
    summary: "Delete a comment (its author, the post's author or an admin)",
    params: CommentParams,
    lock: (tx, { postId, commentId }) => commentsRepository(tx).lockForDelete(postId, commentId),
    rule: (ids) => ({
      missing: missingComment(ids),
      owners: (comment) => [comment.authorId, comment.postAuthorId],
      denied: "only its author, the post's author or an admin may delete this comment",
    }),
    etag: commentEtag,
    remove: (tx, { postId, commentId }) => commentsRepository(tx).delete(postId, commentId),
  });
}

export default commentsRoutes;
