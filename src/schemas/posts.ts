/** Post contracts (docs/api.md §3, §4, §5). */
import { Type } from '@sinclair/typebox';
import {
  AuthorFilter,
  Body,
  Count,
  CreatedRangeParams,
  EmbeddedAuthor,
  FieldsParam,
  Id,
  IncludeParam,
  ListEnvelope,
  ListQuery,
  PathId,
  ReadView,
  SearchParam,
  Text,
  Timestamp,
} from './common.js';

/** What a list of posts may be sorted by; the repository maps each to its column. */
export const POST_SORT_FIELDS = ['id', 'createdAt', 'updatedAt', 'title'] as const;
export type PostSortField = (typeof POST_SORT_FIELDS)[number];

const Title = Text(200, '1–200 characters, not blank');
const PostBodyText = Text(50_000, '1–50 000 characters, not blank');

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

export const POST_FIELDS = ['id', 'title', 'body', 'authorId', 'commentCount', 'createdAt', 'updatedAt'] as const;
export type PostField = (typeof POST_FIELDS)[number];

export const PostViewSchema = ReadView(PostSchema, 'PostView', EmbeddedAuthor);

export const PostBody = Body(
  { title: Title, body: PostBodyText },
  { examples: [{ title: 'Hello', body: 'First post' }] },
);
export const PostPatchBody = Body(
  { title: Type.Optional(Title), body: Type.Optional(PostBodyText) },
  { examples: [{ title: 'Hello again' }] },
);
export const PostParams = Type.Object({ postId: PathId });
export const UserPostsParams = Type.Object({ userId: PathId });
const ReadParams = { ...FieldsParam(POST_FIELDS, ['title', 'createdAt']), ...IncludeParam };
export const PostQuery = Type.Object(ReadParams, { additionalProperties: false });
const ListParams = { ...ReadParams, ...SearchParam, ...CreatedRangeParams };
export const PostListQuery = ListQuery(POST_SORT_FIELDS, { ...AuthorFilter, ...ListParams });
/** The author is the path's user, so there is no author filter. */
export const UserPostListQuery = ListQuery(POST_SORT_FIELDS, ListParams);
export const PostList = ListEnvelope(Type.Ref(PostViewSchema));
