/**
 * Lists in SQL, one round trip each (docs/api.md §5).
 *
 * Offset mode: LIMIT/OFFSET, with the total read from a counter the database
 * keeps (ListSource.total), never a COUNT(*) over a big table.
 *
 * Cursor mode: a row-value keyset `(sort_col, id) > (anchor)` in the requested
 * direction, fetching limit + 1 rows to know whether more follow. The anchor's
 * sort key is resolved inside the same query, so timestamps keep their full
 * microsecond precision; it is looked up among live rows and then among the
 * tombstones of deleted ones, so a cursor stays valid after its item is gone.
 * An `after` found in neither never named an item of the list: 422.
 */
import { join, raw, sql, toQuery, type SqlFragment } from './sql.js';
import type { Queryable } from './pool.js';
import { validation } from '../errors.js';

export type PageRequest =
  | { kind: 'offset'; page: number; perPage: number }
  | { kind: 'cursor'; after: number | undefined; limit: number };

export interface Sort<F extends string> {
  field: F;
  descending: boolean;
}

export interface ListSource<F extends string, Filter> {
  /** Table (constant SQL) the items come from. */
  table: string;
  /** Table keeping the sort keys of deleted items, if items can be deleted. */
  tombstones?: string;
  /** Select list (constant SQL), columns aliased to the JSON names. Must not use found/parent/total. */
  columns: string;
  /** The allow-list: API sort field → column. Only these constants reach the SQL text. */
  sortColumns: Record<F, string>;
  /** Conditions that make an item part of this list, ever (checked on rows and tombstones). */
  scope(filter: Filter): SqlFragment[];
  /** Extra conditions for items listed now (e.g. tokens not yet revoked). */
  live?: SqlFragment[];
  /** Scalar SQL giving the number of listed items; NULL when the parent resource does not exist. */
  total(filter: Filter): SqlFragment;
  /** Boolean SQL: does the parent resource exist? (cursor mode; default TRUE) */
  parentExists?(filter: Filter): SqlFragment;
}

export type OffsetResult<T> = { kind: 'offset'; items: T[]; total: number };
export type CursorResult<T> = { kind: 'cursor'; items: T[]; hasMore: boolean; nextCursor: number | null };
/** null: the parent resource does not exist. */
export type ListResult<T> = OffsetResult<T> | CursorResult<T> | null;

function where(parts: SqlFragment[]): SqlFragment {
  return parts.length ? join(parts, ' AND ') : raw('TRUE');
}

export async function runList<T extends { id: number }, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  page: PageRequest,
): Promise<ListResult<T>> {
  const column = raw(source.sortColumns[sort.field]);
  const dir = raw(sort.descending ? 'DESC' : 'ASC');
  const orderBy = sort.field === 'id' ? sql`ORDER BY id ${dir}` : sql`ORDER BY ${column} ${dir}, id ${dir}`;
  const scope = source.scope(filter);
  const conditions = where([...scope, ...(source.live ?? [])]);
  const from = raw(source.table);
  const columns = raw(source.columns);

  if (page.kind === 'offset') {
    const offset = (page.page - 1) * page.perPage;
    // The lateral reference to h forces a nested loop with h outside, which keeps
    // the inner ORDER BY and skips the item scan entirely when the parent is missing.
    // OFFSET 0 keeps h a subquery evaluated once, instead of its expression being
    // copied into (and run again by) the lateral part.
    // Past the first page the skipped rows are walked on the sort index alone (ids
    // only, an index-only scan) and just the page's rows are read and rendered:
    // selecting all columns would fetch and format every skipped row.
    const items =
      offset === 0
        ? sql`SELECT ${columns} FROM ${from} WHERE h.total IS NOT NULL AND ${conditions}
            ${orderBy} LIMIT ${page.perPage}`
        : sql`SELECT ${columns} FROM ${from} WHERE id IN (
              SELECT id FROM ${from} WHERE h.total IS NOT NULL AND ${conditions}
              ${orderBy} LIMIT ${page.perPage} OFFSET ${offset}
            ) ${orderBy}`;
    const query = sql`SELECT h.total, r.* FROM (SELECT (${source.total(filter)})::int8 AS total OFFSET 0) h
      LEFT JOIN LATERAL (${items}) r ON TRUE`;
    const { rows } = await db.query(toQuery(query));
    const head = rows[0] as { total: number | null } | undefined;
    if (!head || head.total === null) return null;
    return { kind: 'offset', total: head.total, items: head && (rows[0] as T).id === null ? [] : rows.map(strip<T>) };
  }

  const parent = source.parentExists ? source.parentExists(filter) : raw('TRUE');
  let anchor = sql``;
  let found = raw('TRUE');
  let after = raw('TRUE');
  if (page.after !== undefined) {
    const anchorWhere = where([sql`id = ${page.after}`, ...scope]);
    const tomb = source.tombstones
      ? sql` UNION ALL SELECT ${column} AS k, id FROM ${raw(source.tombstones)} WHERE ${anchorWhere}`
      : sql``;
    anchor = sql`WITH anchor AS (SELECT ${column} AS k, id FROM ${from} WHERE ${anchorWhere}${tomb} LIMIT 1) `;
    found = raw('EXISTS (SELECT 1 FROM anchor)');
    const cmp = raw(sort.descending ? '<' : '>');
    after =
      sort.field === 'id'
        ? sql`id ${cmp} (SELECT id FROM anchor)`
        : sql`(${column}, id) ${cmp} (SELECT k, id FROM anchor)`;
  }
  const query = sql`${anchor}SELECT h.found, h.parent, r.* FROM (SELECT ${found} AS found, (${parent}) AS parent OFFSET 0) h
    LEFT JOIN LATERAL (
      SELECT ${columns} FROM ${from} WHERE h.found AND h.parent AND ${conditions} AND ${after}
      ${orderBy} LIMIT ${page.limit + 1}
    ) r ON TRUE`;
  const { rows } = await db.query(toQuery(query));
  const head = rows[0] as { found: boolean; parent: boolean | null };
  if (!head.parent) return null;
  if (!head.found) throw validation({ after: ['does not name an item of this list'] });
  const items = (rows[0] as T).id === null ? [] : rows.map(strip<T>);
  const hasMore = items.length > page.limit;
  if (hasMore) items.length = page.limit;
  return { kind: 'cursor', items, hasMore, nextCursor: hasMore ? items[items.length - 1]!.id : null };
}

function strip<T>(row: Record<string, unknown>): T {
  const { total: _t, found: _f, parent: _p, ...item } = row;
  return item as T;
}
