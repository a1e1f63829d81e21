/**
 * The query parameters of richer reads (docs/api.md §10) as the repositories
 * take them. The schemas have checked each value (distinct field names, the
 * include value, RFC 3339 date-times).
 */
import type { CreatedRange, View } from '../db/views.js';

/** Whether a view is the resource's full representation (the one with a stored ETag). */
export { isFull } from '../db/views.js';

interface ReadQuery {
  fields?: string[];
  include?: 'author';
}

/** The representation asked for (the schema has checked that the fields are distinct). */
export function viewOf<F extends string>(query: ReadQuery): View<F> {
  const view: View<F> = {};
  if (query.include === 'author') view.author = true;
  if (query.fields !== undefined) view.fields = query.fields as F[];
  return view;
}

interface RangeQuery {
  createdAfter?: string;
  createdBefore?: string;
}

/**
 * Only the millisecond a bound falls in, and whether it falls exactly on it,
 * decide a comparison with the shown times (whole milliseconds): digits past
 * the millisecond become `5` (half-way) when any is not zero, which PostgreSQL
 * holds exactly, where it would round a tenth digit and could move a bound
 * across a millisecond.
 */
const toMilliseconds = (value: string | undefined) =>
  value?.replace(/\.(\d{3})(\d*)/, (_, ms: string, rest: string) => `.${ms}${/[1-9]/.test(rest) ? '5' : ''}`);

export function rangeOf(query: RangeQuery): CreatedRange {
  return { createdAfter: toMilliseconds(query.createdAfter), createdBefore: toMilliseconds(query.createdBefore) };
}
