/** Conditional requests (docs/api.md §8); header names lower case, as a custom validator compiler gets them. */
import { Type, type TNull, type TObject, type TOptional, type TRefUnsafe, type TSchema } from '@sinclair/typebox';
import { COMMON_ERRORS, ETag, LinkHeader, ListValidationError, errorResponses } from './common.js';

export const optionalHeaders = (properties: Record<string, TSchema>): TObject<{ [name: string]: TOptional<TSchema> }> =>
  Type.Object(Object.fromEntries(Object.entries(properties).map(([name, schema]) => [name, Type.Optional(schema)])), {
    additionalProperties: true,
  });

// Generous bounds (the OpenAPI document must state one): a real list of tags is far shorter.
const IfNoneMatch = Type.String({
  maxLength: 8192,
  description: 'ETags the client holds (or *); if one matches (weak comparison), the answer is 304 with no body',
});
const IfMatch = Type.String({
  maxLength: 8192,
  description: 'the ETag the client last saw (or *); a write is done only if it still matches, else 412',
});

export const ConditionalGetHeaders = optionalHeaders({ 'if-none-match': IfNoneMatch });
export const ConditionalWriteHeaders = optionalHeaders({ 'if-match': IfMatch });

export const WithEtag = <T extends TSchema>(schema: T, description: string): TRefUnsafe<T> =>
  Type.Ref(schema, { description, headers: { ETag } });

export const NotModified = Type.Null({
  description: 'Not Modified: If-None-Match matched the current ETag; no body',
  headers: { ETag },
});

/** A list route's responses: the page, its 304, and the errors. */
export interface ListResponses<T extends TSchema> {
  200: T;
  304: TNull;
  422: typeof ListValidationError;
}

export const listResponses = <T extends TSchema>(list: T, ...errors: number[]): ListResponses<T> => ({
  200: list,
  304: Type.Null({
    description: 'Not Modified: If-None-Match matched the ETag of this page; no body',
    headers: { ETag, Link: LinkHeader },
  }),
  ...errorResponses(...COMMON_ERRORS, ...errors),
  422: ListValidationError,
});
