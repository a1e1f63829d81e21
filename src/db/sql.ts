/**
 * A tiny tagged template that turns `sql\`... ${value} ...\`` into a
 * parameterized query ({ text, values }) with $n placeholders numbered for us.
 * Interpolated values are always bound parameters; only fragments made by this
 * module (sql, raw with a constant, join) are spliced as SQL text, so user
 * input can never become SQL.
 *
 * Every statement with parameters goes out as a named prepared statement (pg's
 * own `{ name, text, values }`), one name per distinct SQL text, so PostgreSQL
 * parses and analyzes each text once per connection instead of per request,
 * and after a few runs keeps a generic plan where it costs no more than a
 * custom one (plan_cache_mode = auto: point lookups, inserts, updates, the
 * triggers' statements, and lists, whose page size is part of the text for
 * that reason: see pageSize in src/db/pagination/common.ts).
 *
 * A name is a digest of its text, not a counter: several instances (or
 * versions) behind one pooler then never give one name to two texts, so a
 * statement a pooler in transaction mode runs on another server connection
 * is the same statement or none (src/db/pool.ts, LOST_STATEMENT).
 */
import { createHash } from 'node:crypto';

export interface SqlFragment {
  readonly strings: readonly string[];
  readonly values: readonly unknown[];
  readonly [FRAGMENT]: true;
}
const FRAGMENT = Symbol('sql');

function fragment(strings: readonly string[], values: readonly unknown[]): SqlFragment {
  return { strings, values, [FRAGMENT]: true };
}

function isFragment(v: unknown): v is SqlFragment {
  return typeof v === 'object' && v !== null && FRAGMENT in v;
}

export function sql(strings: TemplateStringsArray, ...values: unknown[]): SqlFragment {
  return fragment(strings, values);
}

/** Splices constant SQL text (identifiers from an allow-list, keywords). Never pass user input. */
export function raw(text: string): SqlFragment {
  return fragment([text], []);
}

export function join(parts: readonly SqlFragment[], separator = ', '): SqlFragment {
  if (parts.length === 0) return raw('');
  const strings: string[] = [''];
  const values: unknown[] = [];
  parts.forEach((part, i) => {
    if (i > 0) strings[strings.length - 1] += separator;
    strings.push('');
    values.push(part);
  });
  return fragment(strings, values);
}

export interface Statement {
  name?: string;
  text: string;
  values: unknown[];
}

/** A guard: SQL texts are built from constant fragments only, so there are a few dozen. */
const MAX_PREPARED_STATEMENTS = 500;
const names = new Map<string, string>();

/** The statement, named after its text so that each connection prepares it once. */
export function prepared(text: string, values: unknown[]): Statement {
  if (values.length === 0) return { text, values };
  let name = names.get(text);
  if (name === undefined) {
    if (names.size >= MAX_PREPARED_STATEMENTS) return { text, values };
    name = `posts_api_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
    names.set(text, name);
  }
  return { name, text, values };
}

/**
 * `named: false` sends the statement unnamed, which PostgreSQL plans with the
 * bound values every time: for statements whose best plan depends on them
 * (how common a searched word is, how wide a date range), where a generic
 * plan would fit one value and be ruinous for another.
 */
export function toQuery(root: SqlFragment, named = true): Statement {
  const values: unknown[] = [];
  const walk = (f: SqlFragment): string => {
    let text = f.strings[0] ?? '';
    f.values.forEach((value, i) => {
      text += isFragment(value) ? walk(value) : `$${values.push(value)}`;
      text += f.strings[i + 1] ?? '';
    });
    return text;
  };
  const text = walk(root);
  return named ? prepared(text, values) : { text, values };
}
