/** Comment contracts (docs/api.md §3, §4, §5): comments exist only under their post. */
import { Type } from '@sinclair/typebox';
import {
  AuthorFilter,
  Body,
  CreatedRangeParams,
  EmbeddedAuthor,
  FieldsParam,
  Id,
  IncludeParam,
  ListEnvelope,
  ListQuery,
  PathId,
  ReadView,
  Text,
  Timestamp,
} from './common.js';

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

export const COMMENT_FIELDS = ['id', 'postId', 'authorId', 'body', 'createdAt', 'updatedAt'] as const;
export type CommentField = (typeof COMMENT_FIELDS)[number];

export const CommentViewSchema = ReadView(CommentSchema, 'CommentView', EmbeddedAuthor);

export const CommentBody = Body({ body: CommentBodyText }, { examples: [{ body: 'Nice' }] });
export const CommentPatchBody = Body(
  { body: Type.Optional(CommentBodyText) },
  { examples: [{ body: 'Nice, edited' }] },
);
export const CommentParams = Type.Object({ postId: PathId, commentId: PathId });
const ReadParams = { ...FieldsParam(COMMENT_FIELDS, ['body', 'createdAt']), ...IncludeParam };
export const CommentQuery = Type.Object(ReadParams, { additionalProperties: false });
export const CommentListQuery = ListQuery(COMMENT_SORT_FIELDS, {
  ...AuthorFilter,
  ...ReadParams,
  ...CreatedRangeParams,
});
export const CommentList = ListEnvelope(Type.Ref(CommentViewSchema));
