/** Shared TypeBox contracts: ids, timestamps, the error body, list parameters and envelopes. */
import {
  Type,
  type TArray,
  type TBoolean,
  type TInteger,
  type TNull,
  type TObject,
  type TOptional,
  type TProperties,
  type TRefUnsafe,
  type TSchema,
  type TString,
  type TUnion,
  type TUnknown,
  type TUnsafe,
} from '@sinclair/typebox';
import { ERROR_CODES } from '../errors.js';
import { WELL_FORMED } from '../validation.js';

export const MAX_ID = Number.MAX_SAFE_INTEGER;
const MAX_PAGE = 100_000;

export const Id = Type.Integer({ format: 'int64', minimum: 1, maximum: MAX_ID, description: 'positive integer id' });
/** Always rendered with milliseconds in UTC: exactly 24 characters. */
export const Timestamp = Type.String({ format: 'date-time', maxLength: 24, examples: ['2026-11-22T10:00:00.000Z'] });
export const Count = Type.Integer({ format: 'int64', minimum: 0, maximum: MAX_ID });
export const SmallInt = (minimum: number, maximum: number, options: object = {}): TInteger =>
  Type.Integer({ format: 'int32', minimum, maximum, ...options });

/**
 * The demo account of `npm run seed` and its post, comment, token, webhook and delivery all have this id, far
 * past any sequence: /docs's examples name them whatever the database held before.
 */
export const DEMO_ID = 1_000_000_000;
export const DEMO_EMAIL = 'demo@example.com';
/** Non-canonical digits name no resource (404). The example names the demo account's rows. */
export const PathId = { ...Id, examples: [DEMO_ID] };

/** What PostgreSQL text holds: no NUL, no lone surrogate (a keyword: other regex engines lack surrogate ranges). */
export const Storable = { pattern: '^[^\\x00]*$', 'x-errorMessage': 'must not contain U+0000', [WELL_FORMED]: true };

// JavaScript's \s plus U+0085, written as characters: \s and \u escapes differ between regex engines.
const BLANK = '\t\n\v\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\uFEFF';

/** Not blank; `max` in code points, as PostgreSQL counts. */
export const Text = (max: number, description?: string): TString =>
  Type.String({
    pattern: `[^${BLANK}]`,
    maxLength: max,
    'x-errorMessage': 'must not be blank',
    allOf: [Storable],
    description,
  });

export const StringEnum = <T extends string[]>(values: [...T], options: object = {}): TUnsafe<T[number]> =>
  Type.Unsafe<T[number]>({ type: 'string', enum: values, ...options });

const readOnly = (shown: string): TOptional<TUnknown> =>
  Type.Optional(
    Type.Unknown({ readOnly: true, description: `read-only: any value is accepted and ignored (GET shows ${shown})` }),
  );
/** A client may send these back unchanged (PUT what GET gave): ignored, whatever their value (docs/api.md §2). */
export const ReadOnlyMembers = {
  id: readOnly('the id'),
  authorId: readOnly("the author's id"),
  postId: readOnly("the post's id"),
  commentCount: readOnly('the number of comments'),
  createdAt: readOnly('the creation time'),
  updatedAt: readOnly('the time of the last change'),
};

export const Body = <P extends TProperties>(properties: P, options: object = {}): TObject<typeof ReadOnlyMembers & P> =>
  Type.Object({ ...ReadOnlyMembers, ...properties }, { additionalProperties: false, ...options });

export const ErrorSchema = Type.Object(
  {
    error: StringEnum(Object.values(ERROR_CODES), { examples: ['not_found'] }),
    message: Type.String({ maxLength: 2000 }),
    fieldErrors: Type.Optional(
      Type.Record(Type.String(), Type.Array(Type.String({ maxLength: 500 }), { minItems: 1, maxItems: 20 }), {
        description:
          'only on 422 and 409: each offending field (body property, query parameter or header) with its problems',
      }),
    ),
    requestId: Type.String({ maxLength: 128, description: 'equal to the X-Request-Id header' }),
  },
  { $id: 'Error', additionalProperties: false, description: 'The one error body (docs/api.md §2)' },
);

export const NoContent = Type.Null({ description: 'No content' });

export const NoQuery = Type.Object({}, { additionalProperties: false });

/** A text query parameter: 1–200 characters PostgreSQL can hold. */
const QueryText = (description: string) =>
  Type.Optional(Type.String({ minLength: 1, maxLength: 200, allOf: [Storable], description }));

/** The parameters every list takes beside its own (docs/api.md §5): its sort, and offset or cursor pages. */
export type ListParameters = {
  sort: TOptional<TUnsafe<string>>;
  page: TOptional<TInteger>;
  perPage: TOptional<TInteger>;
  after: TOptional<TInteger>;
  afterKey: TOptional<TString>;
  before: TOptional<TInteger>;
  beforeKey: TOptional<TString>;
  limit: TOptional<TInteger>;
  snapshot: TOptional<TString>;
};

export function ListQuery<F extends string, E extends TProperties = Record<never, never>>(
  sortFields: readonly F[],
  extra: E = {} as E,
): TObject<E & ListParameters> {
  const sortValues = sortFields.flatMap((f) => [f, `-${f}`]);
  const parameters: ListParameters = {
    sort: Type.Optional(
      StringEnum(sortValues, { description: 'one field, leading - for descending; ties break on id', default: 'id' }),
    ),
    page: Type.Optional(SmallInt(1, MAX_PAGE, { description: 'offset mode, default 1' })),
    perPage: Type.Optional(SmallInt(1, 100, { description: 'offset mode, default 20' })),
    after: Type.Optional({
      ...Id,
      description: 'cursor mode: id of the last item already received; not with page/perPage (422)',
    }),
    afterKey: QueryText(
      'cursor mode, with after and a sort other than id: the sort key of that item as the next Link gave it ' +
        '(a UTC timestamp with microseconds, or the text), so the walk resumes where it was even if the item changed since',
    ),
    before: Type.Optional({
      ...Id,
      description:
        'cursor mode: id of the first item already received; the page is the items that precede it, in the sort order. ' +
        'Not with after (422)',
    }),
    beforeKey: QueryText(
      'cursor mode, with before and a sort other than id: the sort key of that item as the prev Link gave it (as afterKey)',
    ),
    limit: Type.Optional(SmallInt(1, 100, { description: 'cursor mode, default 20; not with page/perPage (422)' })),
    snapshot: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 20_000,
        pattern: '^[A-Za-z0-9_-]+$',
        description:
          'offset mode: the opaque token in the Link header of a page requested without one. The page is computed as of ' +
          'that moment: items created since are left out, items deleted since keep their place (not shown), total is then. ' +
          'Valid for an hour (410 after); 422 when malformed or taken from another list',
      }),
    ),
  };
  return Type.Object({ ...extra, ...parameters }, { additionalProperties: false });
}

/** A list: comma-separated, or the parameter repeated (`explode: true`); validation.ts makes either one array. */
function FieldsParam<F extends string>(names: readonly F[], example: F[]) {
  return {
    fields: Type.Optional(
      Type.Array(StringEnum([...names]), {
        minItems: 1,
        maxItems: names.length,
        uniqueItems: true,
        explode: true,
        'x-errorMessage': `must be a comma-separated list of distinct fields among ${names.join(', ')}`,
        description:
          'sparse fieldset, comma-separated or the parameter repeated: each item holds only these fields, plus id always (and author when included)',
        examples: [example],
      }),
    ),
  };
}

const IncludeParam = {
  include: Type.Optional(
    StringEnum(['author'], {
      description: 'author: each item gains author { id, name }, read in the same query',
      examples: ['author'],
    }),
  ),
};

/** `date-time` checks the calendar; the pattern what PostgreSQL refuses (offsets past ±14:00, year 0000). */
const CreatedBound = (side: string) =>
  Type.Optional(
    Type.String({
      format: 'date-time',
      pattern:
        '^(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.][0-9]+)?' +
        '(?:[Zz]|[+-](?:0[0-9]|1[0-3]):[0-5][0-9]|[+-]14:00)$',
      maxLength: 64,
      // Year 0000 is RFC 3339 syntax: the message says which years are taken (docs/api.md §2 quotes it).
      'x-errorMessage':
        'must be an RFC 3339 date-time from year 0001 on, with Z or an offset within ±14:00, e.g. 2026-11-22T10:00:00Z',
      description: `only items created ${side} this RFC 3339 date-time (with Z or an offset); exclusive, at millisecond precision`,
    }),
  );

export const CreatedRangeParams = { createdAfter: CreatedBound('after'), createdBefore: CreatedBound('before') };

export const SearchParam = {
  q: QueryText(
    'full-text search over title and body, web-search syntax: all words must match, "a phrase" in quotes, -word excludes, ' +
      'OR between alternatives; case- and accent-insensitive; e.g. postgres "keyset pagination" -offset',
  ),
};

const EmbeddedAuthor = {
  author: Type.Optional(
    Type.Object(
      { id: Id, name: Type.String({ maxLength: 100 }) },
      { additionalProperties: false, description: 'with include=author' },
    ),
  ),
};

export const AuthorFilter = { author: Type.Optional({ ...Id, description: 'only items by this user id' }) };

export const ETag = {
  type: 'string',
  pattern: '^"[!#-~]*"$',
  maxLength: 64,
  description: 'strong validator of this representation, for If-None-Match (and If-Match on single resources)',
};

export const LinkHeader = {
  type: 'string',
  pattern: '^<[^<>]+>; rel="[a-z]+"(, <[^<>]+>; rel="[a-z]+")*$',
  // Room for two links that each carry a sort key and a search, percent-encoded.
  maxLength: 16384,
  description: 'RFC 8288: next and prev; in offset mode also first and last (path-absolute URLs)',
};

export type CursorPageSchema<T extends TSchema> = TObject<{
  data: TArray<T>;
  limit: TInteger;
  hasMore: TBoolean;
  nextCursor: TUnion<[TInteger, TNull]>;
  prevCursor: TUnion<[TInteger, TNull]>;
}>;

export function CursorPage<T extends TSchema>(item: T, options: object = {}): CursorPageSchema<T> {
  return Type.Object(
    {
      data: Type.Array(item, { maxItems: 100 }),
      limit: SmallInt(1, 100),
      hasMore: Type.Boolean(),
      nextCursor: Type.Union([Id, Type.Null()]),
      prevCursor: Type.Union([Id, Type.Null()], {
        description: 'id of the first item returned when items precede it, else null',
      }),
    },
    { additionalProperties: false, title: 'CursorPage', ...options },
  );
}

export type OffsetPageSchema<T extends TSchema> = TObject<{
  data: TArray<T>;
  page: TInteger;
  perPage: TInteger;
  total: TInteger;
  totalPages: TInteger;
  totalEstimated: TOptional<TBoolean>;
}>;

/** Either page, as the query asks for. */
export type ListEnvelopeSchema<T extends TSchema> = TUnion<[OffsetPageSchema<T>, CursorPageSchema<T>]>;

export function ListEnvelope<T extends TSchema>(item: T): ListEnvelopeSchema<T> {
  const offset: OffsetPageSchema<T> = Type.Object(
    {
      data: Type.Array(item, { maxItems: 100 }),
      page: SmallInt(1, MAX_PAGE),
      perPage: SmallInt(1, 100),
      total: Count,
      totalPages: Count,
      totalEstimated: Type.Optional(
        Type.Boolean({
          description:
            "only on lists filtered by q or a date range: true when more than 10 000 match (or, for a word once counted past that, PostgreSQL expects more), and total (and totalPages) is PostgreSQL's estimate",
        }),
      ),
    },
    { additionalProperties: false, title: 'OffsetPage' },
  );
  return Type.Union([offset, CursorPage(item)], {
    description: 'offset mode (page/perPage) or cursor mode (after/limit), as the query selects',
    // Read by @fastify/swagger into the response's documented headers (docs/api.md §5).
    headers: { ETag, Link: LinkHeader },
  });
}

/** A resource as one item of its list shows it: id always, the other fields when asked for, the author if included. */
export type ViewProperties<P extends TProperties> = { [K in keyof P]: K extends 'id' ? P[K] : TOptional<P[K]> } & {
  author?: TOptional<TObject<{ id: TInteger; name: TString }>> | undefined;
};

/** The parameters of a read, of one item or a list: sparse fields and the author's include. */
export type ReadParameters<P extends TProperties> = {
  include?: TOptional<TUnsafe<'author'>> | undefined;
  fields: TOptional<TArray<TUnsafe<keyof P & string>>>;
};

export interface ResourceSchemas<P extends TProperties, S extends string> {
  schema: TObject<P>;
  view: TObject<ViewProperties<P>>;
  fields: (keyof P & string)[];
  sortFields: readonly S[];
  query: TObject<ReadParameters<P>>;
  /** A list's own parameters, `before` and `after` the item's, in the document's order. */
  listQuery<B extends TProperties, A extends TProperties = Record<never, never>>(
    before: B,
    after?: A,
  ): TObject<B & ReadParameters<P> & A & ListParameters>;
  list: ListEnvelopeSchema<TRefUnsafe<TObject<ViewProperties<P>>>>;
}

/**
 * A resource's read contracts: its schema, named `name`; its view, all fields or only id and those named by fields
 * (with `embeds`, also the author include=author asks for); the query of one item; its list's query and envelope.
 */
export function Resource<P extends TProperties, S extends string>(
  name: string,
  properties: P,
  spec: { sortFields: readonly S[]; example: (keyof P & string)[]; embeds?: boolean },
): ResourceSchemas<P, S> {
  const { sortFields, embeds } = spec;
  const fields = Object.keys(properties) as (keyof P & string)[];
  const optional = Object.fromEntries(
    fields.map((field) => [field, field === 'id' ? properties[field] : Type.Optional(properties[field]!)]),
  ) as { [K in keyof P]: K extends 'id' ? P[K] : TOptional<P[K]> };
  const description = 'all fields, or only id and those named by fields';
  const viewProperties: ViewProperties<P> = { ...optional, ...(embeds && EmbeddedAuthor) };
  const view = Type.Object(viewProperties, { $id: `${name}View`, additionalProperties: false, description });
  const read: ReadParameters<P> = { ...FieldsParam(fields, spec.example), ...(embeds && IncludeParam) };
  return {
    schema: Type.Object(properties, { $id: name, additionalProperties: false }),
    view,
    fields,
    sortFields,
    query: Type.Object(read, { additionalProperties: false }),
    listQuery: <B extends TProperties, A extends TProperties = Record<never, never>>(before: B, after = {} as A) =>
      ListQuery(sortFields, { ...before, ...read, ...after }),
    list: ListEnvelope(Type.Ref(view)),
  };
}

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'bad_request: the body is not a JSON object',
  401: 'unauthorized: missing, malformed, unknown, expired or revoked token',
  403: 'forbidden: not allowed to do this to this resource',
  404: 'not_found',
  409: 'conflict',
  410: 'gone: an event cursor older than the oldest event kept (EVENT_RETENTION), or a list snapshot more than an hour old; start again from the first page',
  412: 'precondition_failed: If-Match does not match the ETag',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  422: 'validation: see fieldErrors (body members, query parameters, headers); unknown query parameters included',
  429: 'rate_limited (with Retry-After)',
  500: 'internal',
  503: 'service_unavailable: the database cannot serve the request (unreachable, missing, refusing the login, busy, read-only, out of disk, timed out, behind the code; the message names which), with Retry-After',
};

export function errorResponses(...statuses: number[]): Record<number, ReturnType<typeof Type.Ref>> {
  return Object.fromEntries(
    statuses.map((s) => [s, Type.Ref(ErrorSchema, { description: ERROR_DESCRIPTIONS[s] ?? 'error' })]),
  ) as Record<number, ReturnType<typeof Type.Ref>>;
}

export const COMMON_ERRORS = [401, 422, 429, 500, 503];

export const ListValidationError = Type.Ref(ErrorSchema, {
  description:
    'validation: see fieldErrors; also when page or perPage is combined with after, before or limit, when before is combined with after, ' +
    'and when after or before names no item of this list',
});
export const BODY_ERRORS = [400, 413, 415, 422];

/** The OpenAPI security requirement of a route that takes a bearer token. */
export const secured = [{ bearerAuth: [] }];
