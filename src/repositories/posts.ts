/**
 * All SQL about posts. Totals never count rows: the global one is the sum of
 * the `counters` slots named 'posts', a user's the sum of their
 * `author_post_counts` slots (at most 16 rows each), and `commentCount` is
 * `posts.comment_count`, all kept exact by triggers (see the migrations).
 * Writes that check ownership first lock the row (`lock`), so the check and the
 * write see the same post and a conditional-request check can slot in between.
 */
import type { Queryable } from '../db/pool.js';
import type { PostField, PostSortField } from '../schemas/posts.js';
import {
  type ListOptions,
  type ListSource,
  type PageRequest,
  type Sort,
  idColumn,
  runList,
  textColumn,
  timestampColumn,
} from '../db/pagination.js';
import { join, sql, prepared, type SqlFragment } from '../db/sql.js';
import {
  type Columns,
  type CreatedRange,
  type View,
  type Viewed,
  createdBetween,
  listView,
  searchMatches,
  selectList,
  viewSource,
} from '../db/views.js';
import { findOne } from '../db/lookups.js';
import { batchedWrite, columnsOf } from '../db/batch.js';
import { foundPastCap, isCommonSearch, searchSettled } from '../db/search-proofs.js';

export interface Post {
  id: number;
  title: string;
  body: string;
  authorId: number;
  commentCount: number;
  createdAt: string;
  updatedAt: string;
}

/** A single post as read for a request about it: `version` is internal (ETags), never serialized. */
export type VersionedPost = Post & { version: number };

export interface PostChanges {
  title?: string;
  body?: string;
}

/** A list's filters: section 5's author, section 10's search and creation range. */
export interface PostFilter extends CreatedRange {
  author?: number | undefined;
  q?: string | undefined;
}

const FIELDS: Columns<PostField> = {
  id: 'id',
  title: 'title',
  body: 'body',
  authorId: 'author_id AS "authorId"',
  commentCount: 'comment_count AS "commentCount"',
  createdAt: 'iso_utc(created_at) AS "createdAt"',
  updatedAt: 'iso_utc(updated_at) AS "updatedAt"',
};

// List items are exactly the JSON members: the list envelope is a union, whose
// serializer rejects items with extra members.
const LIST_COLUMNS = selectList(FIELDS);
const COLUMNS = `${LIST_COLUMNS}, version`;
const ONE = {
  byId: `SELECT ${COLUMNS} FROM posts WHERE id = $1`,
  byIds: `SELECT ${COLUMNS} FROM posts WHERE id = ANY($1::bigint[])`,
};

/**
 * Sorted by id, a recent week would be found by walking the primary key from
 * the first post (a million rows, a second): ids grow with created_at, which
 * the planner does not know, so it expects matches all along the way. A bound
 * on the range's ids lets that walk start where the matches do:
 * - ascending, from `createdAfter`: the smallest floor of the range's hours
 *   (post_floors, kept by the triggers of migrations/1700000000000_baseline.sql:
 *   at most the smallest id ever created in that hour), a read of one row per
 *   hour (168 for a week) where reading the range's first id from the
 *   created_at index read every post of it (19 000, 2 ms). No floor means no
 *   post: the bound is NULL and the page empty, as it should be.
 * - descending, to `createdBefore`: the range's last id, read from the
 *   (created_at, id) index (exact whatever the order of ids and timestamps).
 * The walk from the first post (ascending, no `createdAfter`) or from the last
 * (descending, no `createdBefore`) finds the range's posts at once: no bound.
 */
function idBound(range: CreatedRange, sort: Sort<PostSortField>): SqlFragment[] {
  const { createdAfter, createdBefore } = range;
  if (sort.field !== 'id') return [];
  if (!sort.descending) {
    if (createdAfter === undefined) return [];
    const until = createdBefore === undefined ? sql`` : sql` AND hour <= post_hour(${createdBefore}::timestamptz)`;
    return [
      sql`id >= (SELECT min(min_id) FROM post_floors WHERE hour >= post_hour(${createdAfter}::timestamptz)${until})`,
    ];
  }
  if (createdBefore === undefined) return [];
  // OFFSET 0 keeps max from being planned as a walk of the primary key, the very thing to avoid.
  return [
    sql`id <= (SELECT max(id) FROM (SELECT id FROM posts WHERE ${join(createdBetween(range), ' AND ')} OFFSET 0) r)`,
  ];
}

/** `primary`: where a search is registered for proven totals (src/db/search-proofs.ts). */
function narrowing(
  filter: Omit<PostFilter, 'author'>,
  sort: Sort<PostSortField>,
  primary: Queryable,
): Pick<ListOptions, 'narrow' | 'hints' | 'search'> {
  const { q } = filter;
  const shown = q !== undefined && isCommonSearch(primary, q);
  return {
    narrow: createdBetween(filter),
    hints: idBound(filter, sort),
    ...(q === undefined
      ? {}
      : {
          search: {
            matches: searchMatches(q, shown),
            shown,
            proof: { ready: searchSettled(q), pastCap: (kept: boolean) => foundPastCap(primary, q, kept) },
          },
        }),
  };
}

/**
 * Row locks: DELETE takes the strongest, so comments being written to the post
 * (which lock it FOR NO KEY UPDATE first) finish before or fail cleanly after.
 */
const LOCKS = { update: 'FOR NO KEY UPDATE', delete: 'FOR UPDATE' } as const;

const listBase = {
  table: 'posts',
  tombstones: 'deleted_posts',
  columns: LIST_COLUMNS,
  // Kept by the posts_removed triggers (migrations/1700000000000_baseline.sql).
  removals: `SELECT COALESCE(sum(n), 0) FROM counters WHERE name = 'posts_removed'`,
  sortColumns: {
    id: idColumn,
    createdAt: timestampColumn('created_at'),
    updatedAt: timestampColumn('updated_at'),
    title: textColumn('title'),
  },
} satisfies Partial<ListSource<PostSortField, unknown>>;

const byAuthor = (author: number) => [sql`author_id = ${author}`];
const authorTotal = (author: number) =>
  sql`(SELECT COALESCE(sum(n), 0) FROM author_post_counts WHERE author_id = ${author})`;

/** GET /posts[?author=]: an unknown author is an empty list, not a missing parent. */
const allPosts: ListSource<PostSortField, number | undefined> = {
  ...listBase,
  scope: (author) => (author === undefined ? [] : byAuthor(author)),
  total: (author) =>
    author === undefined ? sql`SELECT COALESCE(sum(n), 0) FROM counters WHERE name = 'posts'` : authorTotal(author),
};

/** GET /users/{userId}/posts: the user is the parent, so a missing one is a 404. */
const postsOfUser: ListSource<PostSortField, number> = {
  ...listBase,
  scope: byAuthor,
  total: (userId) => sql`SELECT ${authorTotal(userId)} FROM users WHERE id = ${userId}`,
  parentExists: (userId) => sql`EXISTS (SELECT 1 FROM users WHERE id = ${userId})`,
};

/**
 * Concurrent creates share one INSERT (src/db/batch.ts). Rows are inserted in
 * the inputs' order, so their identity ids grow in that order: sorted by id,
 * the returned rows line up with the inputs.
 */
const createPosts = batchedWrite<{ authorId: number; title: string; body: string }, VersionedPost>({
  async run(db, inputs) {
    const { rows } = await db.query<VersionedPost>(
      prepared(
        `INSERT INTO posts (author_id, title, body)
         SELECT author_id, title, body FROM unnest($1::bigint[], $2::text[], $3::text[]) WITH ORDINALITY AS i(author_id, title, body, n)
         ORDER BY n RETURNING ${COLUMNS}`,
        columnsOf(inputs, 'authorId', 'title', 'body'),
      ),
    );
    return rows.sort((a, b) => a.id - b.id);
  },
});

/**
 * Concurrent changes share one UPDATE (src/db/batch.ts), one post at most once
 * per statement. A missing field (NULL) keeps its column; a post whose given
 * fields already hold those values, or, with `author`, another author's, is not
 * written and not returned. The posts are locked first, so that a shared
 * statement can skip those locked elsewhere; rows are matched to inputs by id.
 */
const updatePosts = batchedWrite<
  { id: number; author: number | undefined; title: string | undefined; body: string | undefined },
  VersionedPost
>({
  key: (input) => input.id,
  async run(db, inputs, wait) {
    const { rows } = await db.query<VersionedPost>(
      prepared(
        `WITH locked AS (SELECT id FROM posts WHERE id = ANY($1::bigint[]) FOR NO KEY UPDATE${wait ? '' : ' SKIP LOCKED'})
         UPDATE posts SET title = COALESCE(c_title, title), body = COALESCE(c_body, body), version = version + 1, updated_at = now()
         FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS c(c_id, c_author, c_title, c_body)
         WHERE id = c_id AND id IN (SELECT id FROM locked) AND (c_author IS NULL OR author_id = c_author)
           AND ((c_title IS NOT NULL AND title <> c_title) OR (c_body IS NOT NULL AND body <> c_body))
         RETURNING ${COLUMNS}`,
        columnsOf(inputs, 'id', 'author', 'title', 'body'),
      ),
    );
    const written = new Map(rows.map((row) => [row.id, row]));
    return inputs.map((input) => written.get(input.id));
  },
});

/** `primary`: the database writes go to, when `db` is a replica. */
export function postsRepository(db: Queryable, primary: Queryable = db) {
  const findById = (id: number) => findOne<VersionedPost>(db, ONE, id);

  return {
    async create(authorId: number, input: { title: string; body: string }): Promise<VersionedPost> {
      return (await createPosts(db, { authorId, title: input.title, body: input.body }))!;
    },

    findById,

    /** A post as the view renders it (no version: such a view's ETag is a digest of its body). */
    async read(id: number, view: View<PostField>): Promise<Viewed<Post> | undefined> {
      const { rows } = await db.query<Viewed<Post>>(
        prepared(`SELECT ${selectList(FIELDS, view)} FROM ${viewSource('posts', view)} WHERE id = $1`, [id]),
      );
      return rows[0];
    },

    /** Reads and row-locks a post for the rest of the caller's transaction. */
    async lock(id: number, purpose: keyof typeof LOCKS): Promise<VersionedPost | undefined> {
      const { rows } = await db.query<VersionedPost>(
        prepared(`SELECT ${COLUMNS} FROM posts WHERE id = $1 ${LOCKS[purpose]}`, [id]),
      );
      return rows[0];
    },

    /**
     * Only the given fields change; a real change bumps version and updated_at
     * and returns the post as written. An empty one (e.g. only read-only members
     * sent) or one to the values already stored (e.g. a PUT of what GET gave)
     * writes nothing and returns undefined, as does a post that is missing or,
     * with `author`, not that author's: the statement locks, checks and writes at once.
     */
    async update(id: number, changes: PostChanges, author?: number): Promise<VersionedPost | undefined> {
      if (changes.title === undefined && changes.body === undefined) return undefined;
      return updatePosts(db, { id, author, title: changes.title, body: changes.body });
    },

    /** Its comments go with it (ON DELETE CASCADE); triggers keep every total and tombstone. */
    async delete(id: number): Promise<boolean> {
      const { rowCount } = await db.query(prepared('DELETE FROM posts WHERE id = $1', [id]));
      return rowCount === 1;
    },

    list(filter: PostFilter, sort: Sort<PostSortField>, page: PageRequest, view: View<PostField> = {}) {
      return runList<Post, PostSortField, number | undefined>(db, allPosts, filter.author, sort, page, {
        ...listView(FIELDS, 'posts', view),
        ...narrowing(filter, sort, primary),
      });
    },

    /** null when the user does not exist. */
    listOfUser(
      userId: number,
      filter: Omit<PostFilter, 'author'>,
      sort: Sort<PostSortField>,
      page: PageRequest,
      view: View<PostField> = {},
    ) {
      return runList<Post, PostSortField, number>(db, postsOfUser, userId, sort, page, {
        ...listView(FIELDS, 'posts', view),
        ...narrowing(filter, sort, primary),
      });
    },
  };
}
