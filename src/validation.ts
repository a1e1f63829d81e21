/**
 * Request validation with two Ajv instances: query strings and path params are
 * coerced from strings, bodies are not (a JSON number is never a title).
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

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({ removeAdditional: false, useDefaults: true, allErrors: true, verbose: true, strict: false, ...options });
  // int32/int64 only document integer widths (OpenAPI); the schemas' bounds are what is checked.
  addFormats(ajv, ['email', 'date-time', 'uri', 'int32', 'int64']);
  return ajv;
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const coercing = makeAjv({ coerceTypes: true });
  const strict = makeAjv({ coerceTypes: false });
  return ({ schema, httpPart }) =>
    (httpPart === 'body' ? strict : coercing).compile(schema as object) as ReturnType<FastifySchemaCompiler<unknown>>;
}

function describe(error: ErrorObject): string {
  const p = error.params as Record<string, unknown>;
  // A pattern may name its own message (e.g. "must not be blank").
  const custom = (error.parentSchema as Record<string, unknown> | undefined)?.['x-errorMessage'];
  if (error.keyword === 'pattern' && typeof custom === 'string') return custom;
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
