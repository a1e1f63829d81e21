/**
 * Request validation with two Ajv instances: query strings and path params are
 * coerced from strings, bodies are not (a JSON number is never a title).
 * Integers in a query string or a path have one written form: plain decimal
 * digits without sign, leading zero, exponent, fraction or spaces (`page=01`,
 * `page=1e3`, `page=%201`, `page=0x10` are refused: a 422 naming the parameter,
 * or the 404 of a path that names nothing), so one value has one URL.
 * Neither strips unknown properties: the schemas forbid them, so typos fail
 * loudly with 422 instead of passing silently. allErrors reports every
 * problem at once; bodies are bounded by BODY_LIMIT, so this stays cheap.
 */
import { Ajv, type ErrorObject, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import type { FieldErrors } from './errors.js';

// ajv-formats ships CJS with a default export; under NodeNext it arrives wrapped.
type AddFormats = (ajv: Ajv, formats: string[]) => Ajv;
const addFormats = ((addFormatsModule as unknown as { default?: AddFormats }).default ??
  (addFormatsModule as unknown as AddFormats));

/** Schema keyword: the string holds no unpaired UTF-16 surrogate (with the u flag, only a lone one matches \p{Cs}). */
export const WELL_FORMED = 'x-well-formed';
const LONE_SURROGATE = /\p{Cs}/u;

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({ removeAdditional: false, useDefaults: true, allErrors: true, verbose: true, strict: false, ...options });
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

/**
 * Read-only members (`readOnly: true`, typed as GET renders them) are accepted
 * and ignored in a body whatever their value, as OpenAPI means readOnly and
 * the contract promises: a client may send back what it read, or anything.
 */
function ignoringReadOnly(schema: { properties?: Record<string, { readOnly?: boolean }> }): object {
  if (!schema.properties) return schema;
  const properties = Object.fromEntries(
    Object.entries(schema.properties).map(([name, member]) => [name, member.readOnly === true ? {} : member]),
  );
  return { ...schema, properties };
}

const CANONICAL_INTEGER = /^(?:0|[1-9][0-9]*)$/;
const NOT_CANONICAL = 'must be written in plain decimal digits (no sign, leading zero, exponent or spaces)';

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

/**
 * Ajv's coercion takes anything `Number()` reads as an integer; this refuses
 * the strings it would take but that are not the canonical form. Strings that
 * are no integer at all are left to Ajv's own "must be an integer".
 */
function canonicalIntegers(validate: Validate, schema: { properties?: Record<string, { type?: unknown }> }): Validate {
  const integers = Object.entries(schema.properties ?? {}).filter(([, s]) => s.type === 'integer').map(([name]) => name);
  if (integers.length === 0) return validate;
  const checked: Validate = (data) => {
    const values = (data ?? {}) as Record<string, unknown>;
    const wrong = integers.filter((name) => {
      const value = values[name];
      return typeof value === 'string' && !CANONICAL_INTEGER.test(value) && Number.isInteger(Number(value));
    });
    const valid = validate(data);
    const errors = (validate.errors ?? []).filter((e) => !wrong.includes(e.instancePath.split('/')[1] ?? ''));
    for (const name of wrong)
      errors.push({ instancePath: `/${name}`, schemaPath: `#/properties/${name}/type`, keyword: 'canonical', params: {}, message: NOT_CANONICAL });
    checked.errors = errors.length ? errors : null;
    return valid && wrong.length === 0;
  };
  return checked;
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const coercing = makeAjv({ coerceTypes: true });
  const strict = makeAjv({ coerceTypes: false });
  return ({ schema, httpPart }) => {
    if (httpPart === 'body') return strict.compile(ignoringReadOnly(schema as object)) as ReturnType<FastifySchemaCompiler<unknown>>;
    const validate = coercing.compile(schema as object) as Validate;
    const fromUrl = httpPart === 'querystring' || httpPart === 'params';
    return (fromUrl ? canonicalIntegers(validate, schema as object) : validate) as ReturnType<FastifySchemaCompiler<unknown>>;
  };
}

function describe(error: ErrorObject): string {
  const p = error.params as Record<string, unknown>;
  // A pattern may name its own message (e.g. "must not be blank"), which a format it refines shares.
  const custom = (error.parentSchema as Record<string, unknown> | undefined)?.['x-errorMessage'];
  if ((error.keyword === 'pattern' || error.keyword === 'format') && typeof custom === 'string') return custom;
  switch (error.keyword) {
    case 'required':
      return 'is required';
    case 'additionalProperties':
      return 'is not allowed';
    case 'minLength':
      return p.limit === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `must be at most ${String(p.limit)} characters`;
    case 'minimum':
      return `must be at least ${String(p.limit)}`;
    case 'maximum':
      return `must be at most ${String(p.limit)}`;
    case 'type':
      return p.type === 'integer' ? 'must be an integer' : `must be ${/^[aeiou]/.test(String(p.type)) ? 'an' : 'a'} ${String(p.type)}`;
    case 'enum':
      return `must be one of: ${(p.allowedValues as unknown[]).join(', ')}`;
    case 'format':
      return p.format === 'email' ? 'must be a valid e-mail address' : `must be a valid ${String(p.format)}`;
    case 'pattern':
      return 'has an invalid format';
    case WELL_FORMED:
      return 'must not contain unpaired surrogates';
    default:
      return error.message ?? 'is invalid';
  }
}

/** Maps Ajv errors to the contract's fieldErrors: field name → messages. */
export function toFieldErrors(errors: readonly ErrorObject[]): FieldErrors {
  // A Map, not an object literal: a field named after an Object.prototype
  // member (constructor, __proto__, toString) must not find that member.
  const out = new Map<string, string[]>();
  for (const error of errors) {
    const p = error.params as Record<string, unknown>;
    const segments = error.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (error.keyword === 'required') segments.push(String(p.missingProperty));
    if (error.keyword === 'additionalProperties') segments.push(String(p.additionalProperty));
    const field = segments.join('.') || '(root)';
    const message = describe(error);
    const list = out.get(field) ?? [];
    out.set(field, list);
    if (!list.includes(message)) list.push(message);
  }
  // fromEntries defines own properties, so even "__proto__" stays a plain member.
  return Object.fromEntries(out);
}
