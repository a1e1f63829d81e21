/** Comment contracts (docs/api.md §3, §4, §5): comments exist only under their post. */
import { Type } from '@sinclair/typebox';
import { AuthorFilter, Body, Id, ListEnvelope, ListQuery, PathId, Text, Timestamp } from './common.js';

/** What a list of comments may be sorted by; the repository maps each to its column. */
export const COMMENT_SORT_FIELDS = ['id', 'createdAt'] as const;
export type CommentSortField = (typeof COMMENT_SORT_FIELDS)[number];

const CommentBodyText = Text(10_000, '1–10 000 characters, not blank');

export const CommentSchema = Type.Object(
  {
    id: Id,
    postId: Id,
    authorId: Id,
    body: Type.String({ maxLength: 10_000 }),
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { $id: 'Comment', additionalProperties: false },
);

export const CommentBody = Body({ body: CommentBodyText });
export const CommentPatchBody = Body({ body: Type.Optional(CommentBodyText) });
export const CommentParams = Type.Object({ postId: PathId, commentId: PathId });
export const CommentListQuery = ListQuery(COMMENT_SORT_FIELDS, AuthorFilter);
export const CommentList = ListEnvelope(Type.Ref(CommentSchema));
