/**
 * The query parameters of richer reads (docs/api.md §10) as the repositories
 * take them. The schemas have checked each value's shape (field names, the
 * include value, RFC 3339 date-times); what a pattern cannot say is checked here.
 */
import { validation } from '../errors.js';
import type { CreatedRange, View } from '../db/reads.js';

interface ReadQuery {
  fields?: string;
  include?: 'author';
}

/** The representation asked for; a field named twice is a 422 (it is most likely a typo for another). */
export function viewOf<F extends string>(query: ReadQuery): View<F> {
  const view: View<F> = {};
  if (query.include === 'author') view.author = true;
  if (query.fields !== undefined) {
    const fields = query.fields.split(',') as F[];
    const repeated = fields.filter((field, i) => fields.indexOf(field) !== i);
    if (repeated.length) throw validation({ fields: [`names ${[...new Set(repeated)].join(', ')} more than once`] });
    view.fields = fields;
  }
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
