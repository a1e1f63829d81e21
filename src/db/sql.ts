/**
 * A tiny tagged template that turns `sql\`... ${value} ...\`` into a
 * parameterized query ({ text, values }) with $n placeholders numbered for us.
 * Interpolated values are always bound parameters; only fragments made by this
 * module (sql, raw with a constant, join) are spliced as SQL text, so user
 * input can never become SQL.
 */
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

export function toQuery(root: SqlFragment): { text: string; values: unknown[] } {
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
  return { text, values };
}
