/** Post contracts (docs/api.md §3, §4, §5). */
import { Type } from '@sinclair/typebox';
import {
  AuthorFilter,
  Body,
  Count,
  CreatedRangeParams,
  Id,
  PathId,
  Resource,
  SearchParam,
  Text,
  Timestamp,
} from './common.js';

const Title = Text(200, '1–200 characters, not blank');
const PostBodyText = Text(50_000, '1–50 000 characters, not blank');

const Post = Resource(
  'Post',
  {
    id: Id,
    title: Type.String({ maxLength: 200 }),
    body: Type.String({ maxLength: 50_000 }),
    authorId: Id,
    commentCount: Count,
    createdAt: Timestamp,
    updatedAt: Timestamp,
  },
  { sortFields: ['id', 'createdAt', 'updatedAt', 'title'], example: ['title', 'createdAt'], embeds: true },
);
/** What a list of posts may be sorted by; the repository maps each to its column. */
export type PostSortField = (typeof Post.sortFields)[number];
export type PostField = (typeof Post.fields)[number];
export const { schema: PostSchema, view: PostViewSchema, query: PostQuery, list: PostList } = Post;

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
const ListParams = { ...SearchParam, ...CreatedRangeParams };
export const PostListQuery = Post.listQuery(AuthorFilter, ListParams);
/** The author is the path's user, so there is no author filter. */
export const UserPostListQuery = Post.listQuery({}, ListParams);
