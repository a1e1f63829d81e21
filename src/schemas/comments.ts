/** Comment contracts (docs/api.md §3, §4, §5): comments exist only under their post. */
import { Type } from '@sinclair/typebox';
import { AuthorFilter, Body, CreatedRangeParams, Id, PathId, Resource, Text, Timestamp } from './common.js';

const CommentBodyText = Text(10_000, '1–10 000 characters, not blank');

const Comment = Resource(
  'Comment',
  {
    id: Id,
    postId: Id,
    authorId: Id,
    body: Type.String({ maxLength: 10_000 }),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { sortFields: ['id', 'createdAt'], example: ['body', 'createdAt'], embeds: true },
);
/** What a list of comments may be sorted by; the repository maps each to its column. */
export type CommentSortField = (typeof Comment.sortFields)[number];
export type CommentField = (typeof Comment.fields)[number];
export const { schema: CommentSchema, view: CommentViewSchema, query: CommentQuery, list: CommentList } = Comment;

export const CommentBody = Body({ body: CommentBodyText }, { examples: [{ body: 'Nice' }] });
export const CommentPatchBody = Body(
  { body: Type.Optional(CommentBodyText) },
  { examples: [{ body: 'Nice, edited' }] },
);
export const CommentParams = Type.Object({ postId: PathId, commentId: PathId });
export const CommentListQuery = Comment.listQuery(AuthorFilter, CreatedRangeParams);
