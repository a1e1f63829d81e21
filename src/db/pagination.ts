/**
 * Lists in SQL, one round trip each (docs/api.md §5, docs/architecture.md "Lists"): offset pages
 * with totals, and keyset cursors that page both ways and survive edits and deletes of their anchor.
 */
import type { Queryable } from './pool.js';
import {
  type ListOptions,
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
  planList,
} from './pagination/common.js';
import { runOffset } from './pagination/offset.js';
import { runCursor } from './pagination/cursor.js';

export * from './pagination/common.js';

export async function runList<T extends { id: number }, F extends string, Filter>(
  db: Queryable,
  source: ListSource<F, Filter>,
  filter: Filter,
  sort: Sort<F>,
  page: PageRequest,
  options: ListOptions = {},
): Promise<ListResult<T>> {
  const plan = planList(source, filter, sort, options, page.kind === 'offset' ? page.snapshot : undefined);
  return page.kind === 'offset' ? runOffset<T>(db, plan, page) : runCursor<T>(db, plan, page);
}
