/**
 * Shared TypeBox contracts: ids, timestamps, the error body, list parameters
 * and envelopes. These drive validation, serialization, static types and the
 * OpenAPI document alike.
 */
import { Type, type Static, type TSchema, type TObject, type TProperties } from '@sinclair/typebox';
import { ERROR_CODES } from '../errors.js';

export const MAX_ID = Number.MAX_SAFE_INTEGER;
const MAX_PAGE = 100_000;

export const Id = Type.Integer({ format: 'int64', minimum: 1, maximum: MAX_ID, description: 'positive integer id' });
/** Always rendered with milliseconds in UTC: exactly 24 characters. */
export const Timestamp = Type.String({ format: 'date-time', maxLength: 24, examples: ['2026-11-22T10:00:00.000Z'] });
/** Counts and totals: never negative, and far below 2^53 (ids are, too). */
export const Count = Type.Integer({ format: 'int64', minimum: 0, maximum: MAX_ID });
/** Small integers with their bounds, e.g. page sizes. */
export const SmallInt = (minimum: number, maximum: number, options: object = {}) =>
  Type.Integer({ format: 'int32', minimum, maximum, ...options });

/** Path ids: a canonical positive integer, else the path names no resource (404). */
export const PathId = Type.String({ pattern: '^[1-9][0-9]{0,14}$', maxLength: 15, description: 'positive integer id' });

/**
 * What PostgreSQL text can hold faithfully: no NUL (it refuses it) and no
 * unpaired UTF-16 surrogate (it would be stored as U+FFFD, not as sent). The
 * pattern means the same with and without a regex engine's Unicode mode.
 */
export const Storable = {
  pattern: '^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])*$',
  'x-errorMessage': 'must not contain U+0000 or unpaired surrogates',
};

/**
 * Not blank: some character besides Unicode White_Space (JS's \s lacks U+0085);
 * at most `max` characters, counted in code points as PostgreSQL counts them.
 */
export const Text = (max: number, description?: string) =>
  Type.String({ pattern: '[^\\s\\u0085]', maxLength: max, 'x-errorMessage': 'must not be blank', allOf: [Storable], description });

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
    error: StringEnum(Object.values(ERROR_CODES), { examples: ['not_found'] }),
    message: Type.String({ maxLength: 2000 }),
    fieldErrors: Type.Optional(
      Type.Record(Type.String(), Type.Array(Type.String({ maxLength: 500 }), { minItems: 1, maxItems: 20 }), {
        description: 'only on 422 and 409: each offending field (body property, query parameter or header) with its problems',
      }),
    ),
    requestId: Type.String({ maxLength: 128, description: 'equal to the X-Request-Id header' }),
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
      page: Type.Optional(SmallInt(1, MAX_PAGE, { description: 'offset mode, default 1' })),
      perPage: Type.Optional(SmallInt(1, 100, { description: 'offset mode, default 20' })),
      after: Type.Optional({ ...Id, description: 'cursor mode: id of the last item already received' }),
      afterKey: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 200,
          allOf: [Storable],
          description:
            'cursor mode, with after and a sort other than id: the sort key of that item as the next Link gave it ' +
            '(a UTC timestamp with microseconds, or the text), so the walk resumes where it was even if the item changed since',
        }),
      ),
      limit: Type.Optional(SmallInt(1, 100, { description: 'cursor mode, default 20' })),
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
      data: Type.Array(item, { maxItems: 100 }),
      page: SmallInt(1, MAX_PAGE),
      perPage: SmallInt(1, 100),
      total: Count,
      totalPages: Count,
    },
    { additionalProperties: false, title: 'OffsetPage' },
  );
  const cursor = Type.Object(
    {
      data: Type.Array(item, { maxItems: 100 }),
      limit: SmallInt(1, 100),
      hasMore: Type.Boolean(),
      nextCursor: Type.Union([Id, Type.Null()]),
    },
    { additionalProperties: false, title: 'CursorPage' },
  );
  return Type.Union([offset, cursor], {
    description: 'offset mode (page/perPage) or cursor mode (after/limit), as the query selects',
    // Read by @fastify/swagger into the response's documented headers (API.md §5).
    headers: {
      Link: {
        type: 'string',
        maxLength: 4096,
        description: 'RFC 8288: next; in offset mode also prev, first and last (path-absolute URLs)',
      },
    },
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
