/** The query parameters of richer reads (docs/api.md §10), already checked by the schemas. */
import type { CreatedRange, View } from '../db/views.js';

export { isFull } from '../db/views.js';

interface ReadQuery {
  fields?: string[];
  include?: 'author';
}

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
 * Digits past the millisecond become `5` when any is not zero: PostgreSQL would
 * round a tenth digit and could move a bound across a millisecond.
 */
const toMilliseconds = (value: string | undefined) =>
  value?.replace(/\.(\d{3})(\d*)/, (_, ms: string, rest: string) => `.${ms}${/[1-9]/.test(rest) ? '5' : ''}`);

export function rangeOf(query: RangeQuery): CreatedRange {
  return { createdAfter: toMilliseconds(query.createdAfter), createdBefore: toMilliseconds(query.createdBefore) };
}
