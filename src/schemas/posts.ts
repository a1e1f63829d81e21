/** Post and comment contracts (docs/api.md §3, §4, §5). */
import { Type } from '@sinclair/typebox';
import { AuthorFilter, Body, Count, Id, ListEnvelope, ListQuery, PathId, Text, Timestamp } from './common.js';
import { POST_SORT_FIELDS } from '../repositories/posts.js';
import { COMMENT_SORT_FIELDS } from '../repositories/comments.js';

const Title = Text(200, '1–200 characters, not blank');
const PostBodyText = Text(50_000, '1–50 000 characters, not blank');
const CommentBodyText = Text(10_000, '1–10 000 characters, not blank');

export const PostSchema = Type.Object(
  {
    id: Id,
    title: Type.String({ maxLength: 200 }),
    body: Type.String({ maxLength: 50_000 }),
    authorId: Id,
    commentCount: Count,
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { $id: 'Post', additionalProperties: false },
);

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

/** PATCH bodies may also come as a JSON merge patch (RFC 7396), which they are anyway. */
export const PATCH_MEDIA_TYPES = ['application/json', 'application/merge-patch+json'];

/** POST and PUT: a complete post. */
export const PostBody = Body({ title: Title, body: PostBodyText });
/** PATCH: only the given fields change. */
export const PostPatchBody = Body({ title: Type.Optional(Title), body: Type.Optional(PostBodyText) });
export const PostParams = Type.Object({ postId: PathId });
export const UserPostsParams = Type.Object({ userId: PathId });
export const PostListQuery = ListQuery(POST_SORT_FIELDS, AuthorFilter);
/** The author is the path's user, so there is no author filter. */
export const UserPostListQuery = ListQuery(POST_SORT_FIELDS);
export const PostList = ListEnvelope(Type.Ref(PostSchema));

export const CommentBody = Body({ body: CommentBodyText });
export const CommentPatchBody = Body({ body: Type.Optional(CommentBodyText) });
export const CommentParams = Type.Object({ postId: PathId, commentId: PathId });
export const CommentListQuery = ListQuery(COMMENT_SORT_FIELDS, AuthorFilter);
export const CommentList = ListEnvelope(Type.Ref(CommentSchema));
