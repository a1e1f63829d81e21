/** Sort keys as `afterKey`/`beforeKey` carry them: out of the statement as text, back in as typed SQL values. */
import { raw, sql, type SqlFragment } from '../sql.js';
import { validation } from '../../errors.js';
import type { SortColumn } from './common.js';

/** The column as afterKey carries it: timestamps with all six stored decimals, so no two distinct keys collide. */
export function keyText({ column, key }: SortColumn): SqlFragment {
  return key === 'timestamp'
    ? sql`to_char(${raw(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
    : raw(column);
}

const KEY_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z$/;

/** afterKey (beforeKey) as a typed SQL value; anything PostgreSQL would not read back as that key is a 422. */
export function parseKey(key: SortColumn['key'], value: string, name: 'afterKey' | 'beforeKey'): SqlFragment {
  if (key === 'text') return sql`${value}::text`;
  if (!isExactTimestamp(value)) {
    throw validation({ [name]: ['must be a UTC timestamp such as 2026-11-22T10:00:00.123456Z'] });
  }
  return sql`${value}::timestamptz`;
}

/** The calendar and clock fields exist as written (no 24:00, no 31 February, no year 0). */
function isExactTimestamp(value: string): boolean {
  const time = KEY_TIMESTAMP.test(value) ? Date.parse(value) : NaN;
  return (
    !Number.isNaN(time) && !value.startsWith('0000') && new Date(time).toISOString().startsWith(value.slice(0, 19))
  );
}
