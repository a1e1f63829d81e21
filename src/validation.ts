/** URL parts are coerced, bodies not (a JSON number is never a title); a URL integer has one written form. */
import { Ajv, type ErrorObject, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import type { FieldErrors } from './errors.js';

// ajv-formats ships CJS with a default export; under NodeNext it arrives wrapped.
type AddFormats = (ajv: Ajv, formats: string[]) => Ajv;
const addFormats =
  (addFormatsModule as unknown as { default?: AddFormats }).default ?? (addFormatsModule as unknown as AddFormats);

/** Schema keyword: no unpaired UTF-16 surrogate (with the u flag, only a lone one matches \p{Cs}). */
export const WELL_FORMED = 'x-well-formed';
const LONE_SURROGATE = /\p{Cs}/u;

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({
    removeAdditional: false,
    useDefaults: true,
    allErrors: true,
    verbose: true,
    strict: false,
    ...options,
  });
  // int32/int64 only document integer widths (OpenAPI); the schemas' bounds are what is checked.
  addFormats(ajv, ['email', 'date-time', 'uri', 'int32', 'int64']);
  ajv.addKeyword({
    keyword: WELL_FORMED,
    type: 'string',
    schemaType: 'boolean',
    errors: false,
    validate: (wanted: boolean, data: string) => !wanted || !LONE_SURROGATE.test(data),
  });
  return ajv;
}

const CANONICAL_INTEGER = /^(?:0|[1-9][0-9]*)$/;
const NOT_CANONICAL = 'must be written in plain decimal digits (no sign, leading zero, exponent or spaces)';
const REPEATED = 'must be given once';

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };
type Properties = Record<string, { type?: unknown }>;

const refusal = (name: string, keyword: string, message: string): ErrorObject => ({
  instancePath: `/${name}`,
  schemaPath: `#/properties/${name}`,
  keyword,
  params: {},
  message,
});

/**
 * A URL part, past Ajv: a query list comes comma-separated (`fields=title,body`) or repeated (`fields=title&fields=body`,
 * what generated clients send), and either is the one array its schema checks; any other query parameter repeated
 * arrives as an array too, and is refused as repeated rather than as a value of the wrong type; integers are refused
 * when `Number()` takes them but they are not canonical (`01`, `1e3`).
 */
function urlPart(validate: Validate, schema: { properties?: Properties }, query: boolean): Validate {
  const properties = schema.properties ?? {};
  const named = (test: (s: Properties[string]) => boolean) =>
    Object.keys(properties).filter((n) => test(properties[n]!));
  const integers = named((s) => s.type === 'integer');
  const lists = query ? named((s) => s.type === 'array') : [];
  const scalars = query ? named((s) => s.type !== 'array') : [];
  if (integers.length + lists.length + scalars.length === 0) return validate;
  const checked: Validate = (data) => {
    const values = (data ?? {}) as Record<string, unknown>;
    const refused: ErrorObject[] = [];
    for (const name of lists) {
      const value = values[name];
      if (typeof value === 'string' || Array.isArray(value)) values[name] = [value].flat().join(',').split(',');
    }
    for (const name of scalars) {
      if (Array.isArray(values[name])) refused.push(refusal(name, 'repeated', REPEATED));
    }
    for (const name of integers) {
      const value = values[name];
      if (typeof value === 'string' && !CANONICAL_INTEGER.test(value) && Number.isInteger(Number(value)))
        refused.push(refusal(name, 'canonical', NOT_CANONICAL));
    }
    const valid = validate(data);
    const errors = (validate.errors ?? []).filter(
      (e) => !refused.some((r) => r.instancePath === `/${e.instancePath.split('/')[1]}`),
    );
    for (const e of errors) {
      const [, name = '', item] = e.instancePath.split('/');
      if (item !== undefined && lists.includes(name))
        Object.assign(e, { instancePath: `/${name}`, parentSchema: properties[name] });
    }
    errors.push(...refused);
    checked.errors = errors.length ? errors : null;
    return valid && refused.length === 0;
  };
  return checked;
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const coercing = makeAjv({ coerceTypes: true });
  const strict = makeAjv({ coerceTypes: false });
  type Compiled = ReturnType<FastifySchemaCompiler<unknown>>;
  return ({ schema, httpPart }) => {
    if (httpPart === 'body') return strict.compile(schema as object) as Compiled;
    const validate = coercing.compile(schema as object) as Validate;
    const url = httpPart === 'params' || httpPart === 'querystring';
    return (url ? urlPart(validate, schema as object, httpPart === 'querystring') : validate) as Compiled;
  };
}

/** What x-errorMessage speaks for: a pattern, the format it refines, a list's items and length. */
const SHAPE_KEYWORDS = new Set(['pattern', 'format', 'enum', 'maxItems']);

type Params = Record<string, unknown>;
const MESSAGES: Record<string, (p: Params, error: ErrorObject) => string> = {
  uniqueItems: (_, { data }) => {
    const items = data as unknown[];
    return `names ${[...new Set(items.filter((item, i) => items.indexOf(item) !== i))].join(', ')} more than once`;
  },
  required: () => 'is required',
  additionalProperties: () => 'is not allowed',
  minLength: (p) => (p.limit === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`),
  maxLength: (p) => `must be at most ${String(p.limit)} characters`,
  minimum: (p) => `must be at least ${String(p.limit)}`,
  maximum: (p) => `must be at most ${String(p.limit)}`,
  type: (p) =>
    p.type === 'integer'
      ? 'must be an integer'
      : `must be ${/^[aeiou]/.test(String(p.type)) ? 'an' : 'a'} ${String(p.type)}`,
  enum: (p) => `must be one of: ${(p.allowedValues as unknown[]).join(', ')}`,
  format: (p) => (p.format === 'email' ? 'must be a valid e-mail address' : `must be a valid ${String(p.format)}`),
  pattern: () => 'has an invalid format',
  [WELL_FORMED]: () => 'must not contain unpaired surrogates',
};

function describe(error: ErrorObject): string {
  const custom = (error.parentSchema as Params | undefined)?.['x-errorMessage'];
  if (SHAPE_KEYWORDS.has(error.keyword) && typeof custom === 'string') return custom;
  return Object.hasOwn(MESSAGES, error.keyword)
    ? MESSAGES[error.keyword]!(error.params as Params, error)
    : (error.message ?? 'is invalid');
}

export function toFieldErrors(errors: readonly ErrorObject[]): FieldErrors {
  // A Map: a field named after an Object.prototype member (__proto__) must not find it.
  const out = new Map<string, string[]>();
  for (const error of errors) {
    const p = error.params as Params;
    const segments = error.instancePath
      .split('/')
      .slice(1)
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (error.keyword === 'required') segments.push(String(p.missingProperty));
    if (error.keyword === 'additionalProperties') segments.push(String(p.additionalProperty));
    const field = segments.join('.') || '(root)';
    const message = describe(error);
    const list = out.get(field) ?? [];
    out.set(field, list);
    if (!list.includes(message)) list.push(message);
  }
  return Object.fromEntries(out);
}
