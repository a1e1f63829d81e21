/** All SQL about comments, addressed through their post. Writes that touch both lock the post first: no deadlocks. */
import type { Queryable } from '../db/pool.js';
import type { Static } from '@sinclair/typebox';
import type { CommentField, CommentSchema, CommentSortField } from '../schemas/comments.js';
import {
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
  idColumn,
  runList,
  timestampColumn,
} from '../db/pagination.js';
import { firstRow, sql, prepared, written } from '../db/sql.js';
import { batchedWrite, columnsOf } from '../db/batch.js';
import { tracedCte } from '../db/trace-context.js';
import {
  type Columns,
  type CreatedRange,
  type View,
  type Viewed,
  createdBetween,
  listView,
  readView,
  selectList,
} from '../db/views.js';

export type Comment = Static<typeof CommentSchema>;

/** `version` is internal (ETags), never serialized. */
export type VersionedComment = Comment & { version: number };

export interface CommentFilter {
  postId: number;
  author?: number | undefined;
}

const FIELDS: Columns<CommentField> = {
  id: 'id',
  postId: 'post_id AS "postId"',
  authorId: 'author_id AS "authorId"',
  body: 'body',
  createdAt: 'created_at AS "createdAt"',
  updatedAt: 'updated_at AS "updatedAt"',
};

// The list envelope is a union, whose serializer rejects items with extra members.
const LIST_COLUMNS = selectList(FIELDS);
const COLUMNS = `${LIST_COLUMNS}, version`;

const list: ListSource<CommentSortField, CommentFilter> = {
  table: 'comments',
  tombstones: 'deleted_comments',
  columns: LIST_COLUMNS,
  sortColumns: { id: idColumn, createdAt: timestampColumn('created_at') },
  scope: ({ postId, author }) =>
    author === undefined ? [sql`post_id = ${postId}`] : [sql`post_id = ${postId}`, sql`author_id = ${author}`],
  // By author there is no kept counter; the (post_id, author_id, id) index bounds the count.
  total: ({ postId, author }) =>
    author === undefined
      ? sql`SELECT COALESCE((SELECT n FROM comment_counts WHERE post_id = p.id), 0) FROM posts p WHERE p.id = ${postId}`
      : sql`SELECT (SELECT count(*) FROM comments c WHERE c.post_id = p.id AND c.author_id = ${author})
          FROM posts p WHERE p.id = ${postId}`,
  parentExists: ({ postId }) => sql`EXISTS (SELECT 1 FROM posts WHERE id = ${postId})`,
};

/** Posts locked first: a post delete waits or has happened. Ids grow in the inputs' order, so each input's row is the next with its post. */
const createComments = batchedWrite<{ postId: number; authorId: number; body: string }, VersionedComment>({
  async run(db, inputs, wait, traceparent) {
    const { rows } = await db.query<VersionedComment>(
      prepared(
        `WITH ${tracedCte(4)},
         input AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[]) WITH ORDINALITY AS i(post_id, author_id, body, n)),
         post AS (SELECT id FROM posts WHERE id IN (SELECT post_id FROM input) FOR NO KEY UPDATE${wait ? '' : ' SKIP LOCKED'})
         INSERT INTO comments (post_id, author_id, body)
         SELECT i.post_id, i.author_id, i.body FROM traced, input i JOIN post ON post.id = i.post_id ORDER BY i.n
         RETURNING ${COLUMNS}`,
        [...columnsOf(inputs, 'postId', 'authorId', 'body'), traceparent],
      ),
    );
    rows.sort((a, b) => a.id - b.id);
    let next = 0;
    return inputs.map((input) => {
      const row = rows[next];
      if (row?.postId !== input.postId) return undefined;
      next += 1;
      return row;
    });
  },
});

export interface CommentsRepository {
  /** undefined when the post does not exist. */
  create(postId: number, authorId: number, body: string): Promise<VersionedComment | undefined>;
  find(postId: number, id: number): Promise<VersionedComment | undefined>;
  read(postId: number, id: number, view: View<CommentField>): Promise<Viewed<Comment> | undefined>;
  /** For a change of its own columns: the post is not involved. */
  lockForUpdate(postId: number, id: number): Promise<VersionedComment | undefined>;
  /** The post first, then the comment; carries the post's author for the delete rule. */
  lockForDelete(postId: number, id: number): Promise<(VersionedComment & { postAuthorId: number }) | undefined>;
  /** A change to the body already stored leaves the comment as it is. */
  update(postId: number, id: number, changes: { body?: string | undefined }): Promise<VersionedComment | undefined>;
  delete(postId: number, id: number): Promise<boolean>;
  list(
    filter: CommentFilter & CreatedRange,
    sort: Sort<CommentSortField>,
    page: PageRequest,
    view?: View<CommentField>,
  ): Promise<ListResult<Comment>>;
}

export function commentsRepository(db: Queryable): CommentsRepository {
  const find = (postId: number, id: number, lock = '') => {
    const text = `SELECT ${COLUMNS} FROM comments WHERE id = $1 AND post_id = $2${lock}`;
    return firstRow<VersionedComment>(db, text, [id, postId]);
  };

  return {
    create: (postId: number, authorId: number, body: string) => createComments(db, { postId, authorId, body }),

    find: (postId: number, id: number) => find(postId, id),

    read: (postId: number, id: number, view: View<CommentField>) =>
      readView<Comment, CommentField>(db, FIELDS, 'comments', view, 'id = $1 AND post_id = $2', [id, postId]),

    lockForUpdate: (postId: number, id: number) => find(postId, id, ' FOR NO KEY UPDATE'),

    async lockForDelete(postId: number, id: number) {
      const post = await firstRow<{ authorId: number }>(
        db,
        'SELECT author_id AS "authorId" FROM posts WHERE id = $1 FOR NO KEY UPDATE',
        [postId],
      );
      if (!post) return undefined;
      const comment = await find(postId, id, ' FOR UPDATE');
      return comment && { ...comment, postAuthorId: post.authorId };
    },

    async update(postId: number, id: number, changes: { body?: string | undefined }) {
      if (changes.body === undefined) return find(postId, id);
      const row = await firstRow<VersionedComment>(
        db,
        `UPDATE comments SET body = $3, version = version + 1, updated_at = now()
         WHERE id = $1 AND post_id = $2 AND body IS DISTINCT FROM $3 RETURNING ${COLUMNS}`,
        [id, postId, changes.body],
      );
      return row ?? find(postId, id);
    },

    delete: async (postId: number, id: number) =>
      (await written(db, 'DELETE FROM comments WHERE id = $1 AND post_id = $2', [id, postId])) === 1,

    // Parameter types come from CommentsRepository, where they are declared once.
    list(filter, sort, page, view = {}) {
      const options = { ...listView(FIELDS, 'comments', view), narrow: createdBetween(filter) };
      return runList<Comment, CommentSortField, CommentFilter>(db, list, filter, sort, page, options);
    },
  };
}
