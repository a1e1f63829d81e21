/**
 * Shared TypeBox contracts: ids, timestamps, the error body, list parameters
 * and envelopes. These drive validation, serialization, static types and the
 * OpenAPI document alike.
 */
import { Type, type Static, type TSchema, type TObject, type TProperties } from '@sinclair/typebox';

export const MAX_ID = Number.MAX_SAFE_INTEGER;

export const Id = Type.Integer({ minimum: 1, maximum: MAX_ID, description: 'positive integer id' });
export const Timestamp = Type.String({ format: 'date-time', examples: ['2026-11-22T10:00:00.000Z'] });

/** Path ids: a canonical positive integer, else the path names no resource (404). */
export const PathId = Type.String({ pattern: '^[1-9][0-9]{0,14}$', description: 'positive integer id' });

/** Not blank: at least one non-space character, and at most `max` characters. */
export const Text = (max: number, description?: string) =>
  Type.String({ pattern: '\\S', maxLength: max, 'x-errorMessage': 'must not be blank', description });

export const StringEnum = <T extends string[]>(values: [...T], options: object = {}) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: values, ...options });

/**
 * Read-only members a client may send back unchanged (e.g. PUT what it got from
 * GET): accepted and ignored, while any other unknown member is a 422.
 */
export const ReadOnlyMembers = {
  id: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
  authorId: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
  postId: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
  commentCount: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
  createdAt: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
  updatedAt: Type.Optional(Type.Unknown({ readOnly: true, description: 'read-only, ignored' })),
};

export const Body = <P extends TProperties>(properties: P, options: object = {}) =>
  Type.Object({ ...ReadOnlyMembers, ...properties }, { additionalProperties: false, ...options });

export const ErrorSchema = Type.Object(
  {
    error: Type.String({ examples: ['not_found'] }),
    message: Type.String(),
    fieldErrors: Type.Optional(Type.Record(Type.String(), Type.Array(Type.String()))),
    requestId: Type.String(),
  },
  { $id: 'Error', additionalProperties: false, description: 'The one error body (API.md §2)' },
);

export const NoContent = Type.Null({ description: 'No content' });

/** List query parameters; `sort` accepts only the allow-listed fields, `-` for descending. */
export function ListQuery<F extends string, E extends TProperties = {}>(sortFields: readonly F[], extra: E = {} as E) {
  const sortValues = sortFields.flatMap((f) => [f, `-${f}`]);
  return Type.Object(
    {
      ...extra,
      sort: Type.Optional(
        StringEnum(sortValues, { description: 'one field, leading - for descending; ties break on id', default: 'id' }),
      ),
      page: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000, description: 'offset mode, default 1' })),
      perPage: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'offset mode, default 20' })),
      after: Type.Optional({ ...Id, description: 'cursor mode: id of the last item already received' }),
      limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'cursor mode, default 20' })),
    },
    { additionalProperties: false },
  );
}

export const AuthorFilter = {
  author: Type.Optional({ ...Id, description: 'only items by this user id' }),
};

export function ListEnvelope<T extends TSchema>(item: T) {
  const offset = Type.Object(
    {
      data: Type.Array(item),
      page: Type.Integer(),
      perPage: Type.Integer(),
      total: Type.Integer(),
      totalPages: Type.Integer(),
    },
    { additionalProperties: false, title: 'OffsetPage' },
  );
  const cursor = Type.Object(
    {
      data: Type.Array(item),
      limit: Type.Integer(),
      hasMore: Type.Boolean(),
      nextCursor: Type.Union([Id, Type.Null()]),
    },
    { additionalProperties: false, title: 'CursorPage' },
  );
  return Type.Union([offset, cursor], {
    description: 'offset mode (page/perPage) or cursor mode (after/limit), as the query selects',
  });
}

export type ListQueryType = Static<ReturnType<typeof ListQuery<string>>>;
export type WithId = TObject<{ id: typeof Id }>;

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'bad_request: the body is not a JSON object',
  401: 'unauthorized: missing, malformed, unknown, expired or revoked token',
  403: 'forbidden: not allowed to do this to this resource',
  404: 'not_found',
  409: 'conflict',
  412: 'precondition_failed: If-Match does not match the ETag',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  422: 'validation: see fieldErrors',
  429: 'rate_limited (with Retry-After)',
  500: 'internal',
  503: 'service_unavailable: the database is unreachable (with Retry-After)',
};

/** Error responses for a route's schema, all with the one error body. */
export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(
    statuses.map((s) => [s, Type.Ref(ErrorSchema, { description: ERROR_DESCRIPTIONS[s] ?? 'error' })]),
  ) as Record<number, ReturnType<typeof Type.Ref>>;
}

/** Errors any route can give: bad token, rate limit, bug, database down. */
export const COMMON_ERRORS = [401, 429, 500, 503];
/** Errors of routes that take a JSON body. */
export const BODY_ERRORS = [400, 413, 415, 422];
