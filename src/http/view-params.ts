/** The query parameters of richer reads (docs/api.md §10), already checked by the schemas. */
import type { CreatedRange, View } from '../db/views.js';

export function viewOf<F extends string>(query: { fields?: string[]; include?: 'author' }): View<F> {
  const view: View<F> = {};
  if (query.include === 'author') view.author = true;
  if (query.fields !== undefined) view.fields = query.fields as F[];
  return view;
}

/** Digits past the millisecond become `5` if any is not zero: PostgreSQL's rounding could cross a millisecond. */
const toMilliseconds = (value: string | undefined) =>
  value?.replace(/\.(\d{3})(\d*)/, (_, ms: string, rest: string) => `.${ms}${/[1-9]/.test(rest) ? '5' : ''}`);

export function rangeOf(query: { createdAfter?: string; createdBefore?: string }): CreatedRange {
  return { createdAfter: toMilliseconds(query.createdAfter), createdBefore: toMilliseconds(query.createdBefore) };
}
