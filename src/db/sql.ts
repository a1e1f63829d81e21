/** The `sql` tagged template: values are bound parameters; only fragments made here are spliced as text. */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { Queryable } from './pool.js';

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

export const sql = (strings: TemplateStringsArray, ...values: unknown[]): SqlFragment => fragment(strings, values);

/** Splices constant SQL text (identifiers from an allow-list, keywords). Never pass user input. */
export const raw = (text: string): SqlFragment => fragment([text], []);

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

/**
 * Named by a digest of its text, so instances behind one pooler never give one name to two texts. Statements without
 * values too: sent unnamed, they went by the simple protocol, parsed and planned at every run (the first page of a
 * list, the most read of all, spent most of its PostgreSQL time planning).
 */
export function prepared(text: string, values: unknown[]): Statement {
  let name = names.get(text);
  if (name === undefined) {
    if (names.size >= MAX_PREPARED_STATEMENTS) return { text, values };
    name = `posts_api_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
    names.set(text, name);
  }
  return { name, text, values };
}

/** `named: false` for statements whose best plan depends on the values (a date range's width). */
export function toQuery(root: SqlFragment, named = true): Statement {
  const values: unknown[] = [];
  const walk = (f: SqlFragment): string => {
    let text = f.strings[0] ?? '';
    f.values.forEach((value, i) => {
      if (isFragment(value)) {
        text += walk(value);
      } else {
        values.push(value);
        text += `$${values.length}`;
      }
      text += f.strings[i + 1] ?? '';
    });
    return text;
  };
  const text = walk(root);
  return named ? prepared(text, values) : { text, values };
}

export async function firstRow<T extends object>(
  db: Queryable,
  text: string,
  values: unknown[],
): Promise<T | undefined> {
  return (await db.query<T & pg.QueryResultRow>(prepared(text, values))).rows[0];
}

export async function written(db: Queryable, text: string, values: unknown[]): Promise<number> {
  return (await db.query(prepared(text, values))).rowCount ?? 0;
}
