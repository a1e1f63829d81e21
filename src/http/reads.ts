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
 * Digits past the microsecond are dropped: PostgreSQL would round them, which
 * could move a bound across a millisecond, while dropping them decides no
 * comparison with a whole millisecond differently.
 */
const microseconds = (value: string | undefined) => value?.replace(/(\.\d{6})\d+/, '$1');

export function rangeOf(query: RangeQuery): CreatedRange {
  return { createdAfter: microseconds(query.createdAfter), createdBefore: microseconds(query.createdBefore) };
}
