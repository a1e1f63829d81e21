/** /posts/{postId}/comments (docs/api.md §4, §5): comments exist only under their post. */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_ERRORS, COMMON_ERRORS, NoContent, errorResponses } from '../schemas/common.js';
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
import { notFound } from '../errors.js';
import { listResponse, pageRequest, sortOf } from '../http/lists.js';
import { isFull, rangeOf, viewOf } from '../http/view-params.js';
import { changeOwned } from '../use-cases/change-owned.js';
import { commentEtag, conditionalGet, withEtag } from '../http/conditional.js';
import { createOnce } from '../use-cases/create-once.js';
import { Created, IdempotentHeaders } from '../schemas/idempotency.js';
import {
  ConditionalGetHeaders,
  ConditionalWriteHeaders,
  NotModified,
  WithEtag,
  listResponses,
} from '../schemas/conditional.js';

const Comment = WithEtag(CommentSchema, 'the comment');
const CommentView = WithEtag(
  CommentViewSchema,
  "the comment; with fields or include, that representation, whose ETag is a digest of it (If-Match takes the full one's)",
);
const secured = [{ bearerAuth: [] }];

const missingComment = (postId: number, id: number) => `comment ${id} of post ${postId} does not exist`;
const ids = (params: { postId: number; commentId: number }) => [params.postId, params.commentId] as const;

type Api = Parameters<FastifyPluginAsyncTypebox>[0];

const commentsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(CommentSchema);
  app.addSchema(CommentViewSchema);
  readRoutes(app);
  await app.register(async (authed) => {
    authed.addHook('onRequest', app.requireUser);
    const r = authed.withTypeProvider<TypeBoxTypeProvider>();
    createRoute(r);
    changeRoutes(r);
  });
};

function readRoutes(app: Api) {
  // Public reads may go to a replica (request.replica, src/plugins/read-routing.ts).
  const publicReads = readRepository(commentsRepository, app.db);

  app.get(
    '/posts/:postId/comments',
    {
      config: { readsReplica: true },
      schema: {
        tags: ['comments'],
        operationId: 'listComments',
        summary: 'List the comments of a post',
        params: PostParams,
        querystring: CommentListQuery,
        headers: ConditionalGetHeaders,
        response: listResponses(CommentList, 404),
      },
    },
    async (request, reply) => {
      const { query } = request;
      const postId = request.params.postId;
      const page = pageRequest(query);
      const result = await publicReads(request).list(
        { postId, author: query.author, ...rangeOf(query) },
        sortOf(query),
        page,
        viewOf(query),
      );
      if (!result) throw notFound(`post ${postId} does not exist`);
      return listResponse(request, reply, result, page);
    },
  );

  app.get(
    '/posts/:postId/comments/:commentId',
    {
      config: { readsReplica: true },
      schema: {
        tags: ['comments'],
        operationId: 'getComment',
        summary: 'One comment of a post',
        params: CommentParams,
        querystring: CommentQuery,
        headers: ConditionalGetHeaders,
        response: { 200: CommentView, 304: NotModified, ...errorResponses(...COMMON_ERRORS, 404) },
      },
    },
    async (request, reply) => {
      const [postId, id] = ids(request.params);
      const view = viewOf<CommentField>(request.query);
      if (!isFull(view)) {
        // Its ETag is a digest of the body: it differs from the full comment's and follows the author's name.
        const partial = await publicReads(request).read(postId, id, view);
        if (!partial) throw notFound(missingComment(postId, id));
        return partial;
      }
      const comment = await publicReads(request).find(postId, id);
      if (!comment) throw notFound(missingComment(postId, id));
      return conditionalGet(request, reply, commentEtag(comment), comment);
    },
  );
}

function createRoute(r: Api) {
  r.post(
    '/posts/:postId/comments',
    {
      schema: {
        tags: ['comments'],
        operationId: 'createComment',
        summary: 'Comment on a post',
        security: secured,
        params: PostParams,
        headers: IdempotentHeaders,
        body: CommentBody,
        response: {
          201: Created(CommentSchema, 'the new comment'),
          ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const postId = request.params.postId;
      const { body } = request.body;
      return createOnce(request, reply, {
        kind: 'comment',
        input: { body },
        create: async (db) => {
          const comment = await commentsRepository(db).create(postId, request.user!.id, body);
          if (!comment) throw notFound(`post ${postId} does not exist`);
          return { id: comment.id, etag: commentEtag(comment), body: comment };
        },
      });
    },
  );
}

function changeRoutes(r: Api) {
  r.patch(
    '/posts/:postId/comments/:commentId',
    {
      schema: {
        tags: ['comments'],
        operationId: 'updateComment',
        summary: 'Change a comment (its author or an admin)',
        description: 'Only the given fields change. Also accepts application/merge-patch+json.',
        security: secured,
        params: CommentParams,
        headers: ConditionalWriteHeaders,
        body: CommentPatchBody,
        response: { 200: Comment, ...errorResponses(...COMMON_ERRORS, ...BODY_ERRORS, 403, 404, 412) },
      },
    },
    async (request, reply) => {
      const [postId, id] = ids(request.params);
      const comment = await changeOwned<VersionedComment, VersionedComment>(request, {
        lock: (tx) => commentsRepository(tx).lockForUpdate(postId, id),
        rule: {
          missing: missingComment(postId, id),
          owners: (comment) => [comment.authorId],
          denied: 'only its author or an admin may change this comment',
        },
        etag: commentEtag,
        write: async (tx) => (await commentsRepository(tx).update(postId, id, { body: request.body.body }))!,
      });
      return withEtag(reply, commentEtag(comment), comment);
    },
  );

  r.delete(
    '/posts/:postId/comments/:commentId',
    {
      schema: {
        tags: ['comments'],
        operationId: 'deleteComment',
        summary: "Delete a comment (its author, the post's author or an admin)",
        security: secured,
        params: CommentParams,
        headers: ConditionalWriteHeaders,
        response: { 204: NoContent, ...errorResponses(...COMMON_ERRORS, 403, 404, 412) },
      },
    },
    async (request, reply) => {
      const [postId, id] = ids(request.params);
      await changeOwned<VersionedComment & { postAuthorId: number }, void>(request, {
        lock: (tx) => commentsRepository(tx).lockForDelete(postId, id),
        rule: {
          missing: missingComment(postId, id),
          owners: (comment) => [comment.authorId, comment.postAuthorId],
          denied: "only its author, the post's author or an admin may delete this comment",
        },
        etag: commentEtag,
        write: async (tx) => {
          await commentsRepository(tx).delete(postId, id);
        },
      });
      return reply.code(204).send(null);
    },
  );
}

export default commentsRoutes;
