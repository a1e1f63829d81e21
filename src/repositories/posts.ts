/** All SQL about posts. Totals are rows the triggers keep (`counters`, `author_post_counts`, `comment_counts`). */
import { LRUCache } from 'lru-cache';
import type { Queryable } from '../db/pool.js';
import { perDatabase } from '../db/per-database.js';
import type { Static } from '@sinclair/typebox';
import type { PostField, PostSchema, PostSortField } from '../schemas/posts.js';
import {
  type ListOptions,
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
  counter,
  idColumn,
  runList,
  textColumn,
  timestampColumn,
} from '../db/pagination.js';
import { firstRow, raw, sql, prepared, written } from '../db/sql.js';
import {
  type Columns,
  type CreatedRange,
  type View,
  type Viewed,
  createdBetween,
  listView,
  readView,
  searchMatches,
  selectList,
} from '../db/views.js';
import { lookup } from '../db/lookups.js';
import { batchedWrite, columnsOf } from '../db/batch.js';
import { tracedCte } from '../db/trace-context.js';

export type Post = Static<typeof PostSchema>;

/** `version` is internal (ETags), never serialized. */
export type VersionedPost = Post & { version: number };

export interface PostFilter extends CreatedRange {
  author?: number | undefined;
  q?: string | undefined;
}

const FIELDS: Columns<PostField> = {
  id: 'id',
  title: 'title',
  body: 'body',
  authorId: 'author_id AS "authorId"',
  // A subquery naming the table: these lists also serve RETURNING and joined lists.
  commentCount: 'COALESCE((SELECT n FROM comment_counts WHERE post_id = posts.id), 0) AS "commentCount"',
  createdAt: 'created_at AS "createdAt"',
  updatedAt: 'updated_at AS "updatedAt"',
};

// The list envelope is a union, whose serializer rejects items with extra members.
const LIST_COLUMNS = selectList(FIELDS);
const COLUMNS = `${LIST_COLUMNS}, version`;
const findPost = lookup<VersionedPost>({
  byId: `SELECT ${COLUMNS} FROM posts WHERE id = $1`,
  byIds: `SELECT ${COLUMNS} FROM posts WHERE id = ANY($1::bigint[])`,
});

/** A word once counted past the threshold is shown to the planner, which then counts it by a cheap walk. */
const commonOn = perDatabase(() => new LRUCache<string, true>({ max: 1_000 }));

function listOptions(filter: Omit<PostFilter, 'author'>, view: View<PostField>, primary: Queryable): ListOptions {
  const { q } = filter;
  const range = createdBetween(filter);
  const options = { ...listView(FIELDS, 'posts', view), narrow: range, boundedBy: range };
  if (q === undefined) return options;
  const shown = commonOn(primary).has(q);
  return {
    ...options,
    search: {
      matches: searchMatches(q, shown),
      shown,
      planned: searchMatches(q, true),
      pastThreshold: () => commonOn(primary).set(q, true),
    },
  };
}

// DELETE takes the strongest, so comment writes (FOR NO KEY UPDATE) finish first or fail cleanly.
const LOCKS = { update: 'FOR NO KEY UPDATE', delete: 'FOR UPDATE' } as const;

const listBase = {
  table: 'posts',
  tombstones: 'deleted_posts',
  inIdOrder: true,
  columns: LIST_COLUMNS,
  sortColumns: {
    id: idColumn,
    createdAt: timestampColumn('created_at'),
    updatedAt: timestampColumn('updated_at'),
    title: textColumn('title'),
  },
} satisfies Partial<ListSource<PostSortField, unknown>>;

const byAuthor = (author: number) => [sql`author_id = ${author}`];
const authorTotal = (author: number) =>
  sql`COALESCE((SELECT n FROM author_post_counts WHERE author_id = ${author}), 0)`;

/** post_page_start (migrations): the posts' ranks, list 0 every post, else an author's. */
const RANKED_SORTS: PostSortField[] = ['id', 'createdAt'];

/** An unknown author is an empty list, not a missing parent. */
const allPosts: ListSource<PostSortField, number | undefined> = {
  ...listBase,
  scope: (author) => (author === undefined ? [] : byAuthor(author)),
  total: (author) => (author === undefined ? raw(counter('posts')) : authorTotal(author)),
  ranks: { start: 'post_page_start', sorts: RANKED_SORTS, scope: (author) => sql`${author ?? 0}::int8` },
};

const postsOfUser: ListSource<PostSortField, number> = {
  ...listBase,
  scope: byAuthor,
  ranks: { start: 'post_page_start', sorts: RANKED_SORTS, scope: (userId) => sql`${userId}::int8` },
  total: (userId) => sql`SELECT ${authorTotal(userId)} FROM users WHERE id = ${userId}`,
  parentExists: (userId) => sql`EXISTS (SELECT 1 FROM users WHERE id = ${userId})`,
};

/** Rows are inserted in the inputs' order, so sorted by id they line up with the inputs. */
const createPosts = batchedWrite<{ authorId: number; title: string; body: string }, VersionedPost>({
  async run(db, inputs, _wait, traceparent) {
    const { rows } = await db.query<VersionedPost>(
      prepared(
        `WITH ${tracedCte(4)}
         INSERT INTO posts (author_id, title, body)
         SELECT author_id, title, body
         FROM traced, unnest($1::bigint[], $2::text[], $3::text[]) WITH ORDINALITY AS i(author_id, title, body, n)
         ORDER BY n RETURNING ${COLUMNS}`,
        [...columnsOf(inputs, 'authorId', 'title', 'body'), traceparent],
      ),
    );
    return rows.sort((a, b) => a.id - b.id);
  },
});

/** Posts already so, or another author's, are not written; locked first, so a shared statement can skip some. */
const updatePosts = batchedWrite<
  { id: number; author: number | undefined; title: string | undefined; body: string | undefined },
  VersionedPost
>({
  key: (input) => input.id,
  async run(db, inputs, wait, traceparent) {
    const { rows } = await db.query<VersionedPost>(
      prepared(
        `WITH ${tracedCte(5)},
         locked AS (SELECT id FROM posts WHERE id = ANY($1::bigint[]) FOR NO KEY UPDATE${wait ? '' : ' SKIP LOCKED'})
         UPDATE posts SET title = COALESCE(c_title, title), body = COALESCE(c_body, body), version = version + 1, updated_at = now()
         FROM traced, unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS c(c_id, c_author, c_title, c_body)
         WHERE id = c_id AND id IN (SELECT id FROM locked) AND (c_author IS NULL OR author_id = c_author)
           AND ((c_title IS NOT NULL AND title <> c_title) OR (c_body IS NOT NULL AND body <> c_body))
         RETURNING ${COLUMNS}`,
        [...columnsOf(inputs, 'id', 'author', 'title', 'body'), traceparent],
      ),
    );
    const written = new Map(rows.map((row) => [row.id, row]));
    return inputs.map((input) => written.get(input.id));
  },
});

export interface PostsRepository {
  create(authorId: number, input: { title: string; body: string }): Promise<VersionedPost>;
  findById(id: number): Promise<VersionedPost | undefined>;
  read(id: number, view: View<PostField>): Promise<Viewed<Post> | undefined>;
  lock(id: number, purpose: keyof typeof LOCKS): Promise<VersionedPost | undefined>;
  /** undefined when nothing changes, the post is missing, or it is not `author`'s. */
  update(id: number, changes: { title?: string; body?: string }, author?: number): Promise<VersionedPost | undefined>;
  delete(id: number): Promise<boolean>;
  list(
    filter: PostFilter,
    sort: Sort<PostSortField>,
    page: PageRequest,
    view?: View<PostField>,
  ): Promise<ListResult<Post>>;
  listOfUser(
    userId: number,
    filter: Omit<PostFilter, 'author'>,
    sort: Sort<PostSortField>,
    page: PageRequest,
    view?: View<PostField>,
  ): Promise<ListResult<Post>>;
}

/** `primary` keys the memory of common search words, so lists read on any replica share it. */
export function postsRepository(db: Queryable, primary: Queryable = db): PostsRepository {
  return {
    async create(authorId: number, input: { title: string; body: string }): Promise<VersionedPost> {
      return (await createPosts(db, { authorId, title: input.title, body: input.body }))!;
    },

    findById: (id: number) => findPost(db, id),

    read: (id: number, view: View<PostField>) => readView<Post, PostField>(db, FIELDS, 'posts', view, 'id = $1', [id]),

    lock: (id: number, purpose: keyof typeof LOCKS) =>
      firstRow<VersionedPost>(db, `SELECT ${COLUMNS} FROM posts WHERE id = $1 ${LOCKS[purpose]}`, [id]),

    async update(id: number, changes: { title?: string; body?: string }, author?: number) {
      if (changes.title === undefined && changes.body === undefined) return undefined;
      return updatePosts(db, { id, author, title: changes.title, body: changes.body });
    },

    delete: async (id: number) => (await written(db, 'DELETE FROM posts WHERE id = $1', [id])) === 1,

    // Parameter types come from PostsRepository, where they are declared once.
    list(filter, sort, page, view = {}) {
      const options = listOptions(filter, view, primary);
      return runList<Post, PostSortField, number | undefined>(db, allPosts, filter.author, sort, page, options);
    },

    listOfUser(userId, filter, sort, page, view = {}) {
      const options = listOptions(filter, view, primary);
      return runList<Post, PostSortField, number>(db, postsOfUser, userId, sort, page, options);
    },
  };
}
