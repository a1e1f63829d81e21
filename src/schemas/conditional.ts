/**
 * Contracts of conditional requests (docs/api.md §8): the optional request
 * headers, the response headers and the 304 response, so the OpenAPI document
 * shows them and they are validated like any other input (Idempotency-Key's
 * are in schemas/idempotency.ts).
 * Header objects allow every other header (`additionalProperties: true`) and
 * name theirs in lower case: that is how Node hands headers over, and Fastify
 * does not lower-case schemas compiled by a custom validator compiler (ours).
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { COMMON_ERRORS, ETag, LinkHeader, ListValidationError, errorResponses } from './common.js';

/** Optional request headers, each validated when present. */
export const optionalHeaders = (properties: Record<string, TSchema>) =>
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

/** A single resource with its ETag (GET, PATCH, PUT). */
export const WithEtag = <T extends TSchema>(schema: T, description: string) =>
  Type.Ref(schema, { description, headers: { ETag } });

export const NotModified = Type.Null({
  description: 'Not Modified: If-None-Match matched the current ETag; no body',
  headers: { ETag },
});

/** Every list answers 200, or 304 to an If-None-Match naming its ETag (docs/api.md §11), and the list errors. */
export const listResponses = <T extends TSchema>(list: T, ...errors: number[]) => ({
  200: list,
  304: Type.Null({
    description: 'Not Modified: If-None-Match matched the ETag of this page; no body',
    headers: { ETag, Link: LinkHeader },
  }),
  ...errorResponses(...COMMON_ERRORS, ...errors),
  422: ListValidationError,
});
