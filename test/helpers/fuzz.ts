/**
 * Property-based fuzzing of every endpoint through app.inject on the production
 * app (issue 9). One definition, two budgets: test/integration/fuzz.test.ts runs
 * it briefly on every `npm test`, test/slow/fuzz.test.ts runs it long.
 *
 * Inputs attack the service the way the world will: Unicode edge cases (NUL,
 * lone surrogates, combining marks, RTL, emoji, 4-byte characters exactly at the
 * length limits, every Unicode space), wrong JSON types, oversized and deeply
 * nested bodies, odd content types and charsets, injection attempts in query
 * parameters, path ids and headers, huge numbers, duplicated parameters.
 *
 * Oracles, strongest first: where the contract decides the outcome from the
 * input alone (a body's field rules, a path id's shape), the exact status and
 * the offending fields are predicted, and what is accepted must read back
 * unchanged; everywhere, no 500 and the one error body (contract.ts). After the
 * run, SQL checks that every stored title, body and name satisfies docs/api.md §3.
 *
 * What is sent where is read from the OpenAPI document the app builds from its
 * routes (issue 45): every operation that takes a body gets the raw bodies, every
 * path id of every operation gets the hostile ids, every list that takes `sort`
 * its query parameters and sort values; path ids name resources the suite creates.
 * The field rules are the contract's own and stay written out, per operation; a
 * check fails naming any operation the document has and the suite cannot reach
 * (a new resource's, say), and another any it did not send.
 *
 * Set FUZZ_SEED to replay a failure fast-check reported.
 */
import fc from 'fast-check';
import type { InjectOptions } from 'fastify';
import { beforeAll, describe, expect, it } from 'vitest';
import { newToken } from '../../src/security.js';
import { tokensRepository } from '../../src/repositories/tokens.js';
import { createComment, createPost, useTestApp, type SignedUp, type TestApp } from './factories.js';
import { describeResponse, expectContractResponse, type AnyResponse } from './contract.js';
import {
  fillPath,
  needsToken,
  openApiDocument,
  operationsOf,
  pathParameters,
  queryParameter,
  successes,
  type Document,
  type Operation,
} from './operations.js';

if (process.env.FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.FUZZ_SEED) });

// ---------------------------------------------------------------- the rules

/** What the contract calls blank: nothing but Unicode White_Space (JS \s lacks U+0085, and adds U+FEFF). */
const BLANK = /^[\s\u0085]*$/;
/** What PostgreSQL text cannot hold faithfully: NUL, and UTF-16 halves that encode no character. */
const UNSTORABLE = /\u0000|\p{Cs}/u;
/** The same rules in SQL, for the check of what was stored. */
const SQL_NOT_BLANK = `'[^\\u0009-\\u000D\\u0020\\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF]'`;

/** Ajv and PostgreSQL both count code points. */
const length = (s: string) => [...s].length;

export function textIsValid(value: unknown, max: number): value is string {
  return typeof value === 'string' && length(value) <= max && !BLANK.test(value) && !UNSTORABLE.test(value);
}

/** Fastify refuses prototype-poisoning JSON (`__proto__`, `constructor.prototype`) with a 400, before validation. */
export function poisoned(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  return Object.entries(value).some(
    ([key, inner]) =>
      key === '__proto__' ||
      (key === 'constructor' && typeof inner === 'object' && inner !== null && Object.hasOwn(inner, 'prototype')) ||
      poisoned(inner),
  );
}

const READ_ONLY = ['id', 'authorId', 'postId', 'commentCount', 'createdAt', 'updatedAt'];

interface FieldRule {
  max: number;
  required: boolean;
}

/** The fields the contract will blame for this body: missing, invalid or unknown ones. */
export function blamedFields(body: Record<string, unknown>, rules: Record<string, FieldRule>): string[] {
  const blamed = new Set<string>();
  for (const [field, rule] of Object.entries(rules)) {
    if (!Object.hasOwn(body, field)) {
      if (rule.required) blamed.add(field);
    } else if (!textIsValid(body[field], rule.max)) blamed.add(field);
  }
  for (const key of Object.keys(body)) if (!Object.hasOwn(rules, key) && !READ_ONLY.includes(key)) blamed.add(key);
  return [...blamed].sort();
}

// ---------------------------------------------------------------- generators

const EDGE_CHARS = [
  '\u0000',
  '\ud800',
  '\udbff',
  '\udc00',
  '\udfff', // NUL, lone surrogates
  '\u0301',
  'e\u0301',
  '\u0345', // combining marks
  '\u202e',
  '\u200f',
  '\u05d0',
  '\u0627\u0644', // RTL override/mark, Hebrew, Arabic
  '😀',
  '👨‍👩‍👧',
  '🇩🇪',
  '\u{10FFFF}',
  '\u{1D11E}', // 4-byte characters, ZWJ sequence, flag
  '\u200b',
  '\u2060',
  '\ufffd',
  '\uffff',
  '\u00ad', // invisible, replacement, non-character
  "'",
  '"',
  '\\',
  '%',
  '$1',
  '--',
  ';',
  '<',
  '\r\n',
  'a',
  'Z',
  '0',
];
const WHITESPACE = [
  ' ',
  '\t',
  '\n',
  '\r',
  '\u000b',
  '\f',
  '\u0085',
  '\u00a0',
  '\u1680',
  '\u2000',
  '\u200a',
  '\u2028',
  '\u2029',
  '\u202f',
  '\u205f',
  '\u3000',
  '\ufeff',
];

const char = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...EDGE_CHARS, ...WHITESPACE) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }) },
);

/** Strings around the limit, measured in code points, built by repeating a short motif. */
const aroundLimit = (max: number) =>
  fc
    .tuple(
      fc.integer({ min: Math.max(0, max - 1), max: max + 1 }),
      fc.array(char, { minLength: 1, maxLength: 3 }),
      fc.option(char, { nil: undefined }),
    )
    .map(([n, motif, odd]) => {
      const points = motif.flatMap((c) => [...c]);
      const out: string[] = [];
      for (let i = 0; i < n; i++) out.push(points[i % points.length]!);
      // Sometimes one odd character somewhere in the middle (e.g. a lone NUL in 50 000 letters).
      if (odd !== undefined && out.length > 0) out[Math.floor(out.length / 2)] = odd;
      return out.join('');
    });

export const text = (max: number) =>
  fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: char, minLength: 1, maxLength: 10 }) },
    { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom(...WHITESPACE), maxLength: 5 }) },
    { weight: 2, arbitrary: aroundLimit(max) },
    { weight: 1, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }) },
  );

let deepCache: unknown;
/** 2 000 levels of arrays (the raw bodies go to 50 000): nothing may recurse on them, fast-check's reports included. */
const deep = () =>
  (deepCache ??= Object.defineProperty(JSON.parse(`${'['.repeat(2_000)}1${']'.repeat(2_000)}`), fc.toStringMethod, {
    value: () => '[[[…2 000 levels…]]]',
  }));

const notAString = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(2 ** 64),
  fc.array(fc.string(), { maxLength: 2 }),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.string({ maxLength: 3 }), { maxKeys: 2 }),
  fc.constant(null).map(() => deep()),
);

const fieldValue = (max: number) => fc.oneof({ weight: 6, arbitrary: text(max) }, { weight: 1, arbitrary: notAString });

/** Names clients get wrong, and names that are also properties of every JS object. */
const UNKNOWN_KEYS = [
  'Title',
  'titel',
  'role',
  'password_hash',
  'constructor',
  'toString',
  'hasOwnProperty',
  'valueOf',
  'a.b',
  'x/y',
  '😀',
  ' title',
];

/** A body with the given fields, maybe read-only members sent back, maybe an unknown member. */
function bodyOf(fields: Record<string, number>) {
  const shape = Object.fromEntries(Object.entries(fields).map(([name, max]) => [name, fieldValue(max)]));
  return fc
    .tuple(
      fc.record(shape, { requiredKeys: [] }),
      fc.option(
        fc.record(Object.fromEntries(READ_ONLY.map((k) => [k, fc.jsonValue({ maxDepth: 2 })])), { requiredKeys: [] }),
        { nil: undefined },
      ),
      fc.option(fc.tuple(fc.constantFrom(...UNKNOWN_KEYS), fc.jsonValue({ maxDepth: 1 })), { freq: 4, nil: undefined }),
    )
    .map(([main, readOnly, unknown]) => {
      const body: Record<string, unknown> = { ...readOnly, ...main };
      if (unknown) body[unknown[0]] = unknown[1];
      return body;
    });
}

/** Raw request bodies: valid, broken, not objects, deep, oversized, poisoned. */
const rawBody = fc.oneof(
  fc.constant('{"title":"t","body":"b"}'),
  fc.json({ maxDepth: 3 }),
  fc.string({ unit: char, maxLength: 20 }),
  fc.constantFrom(
    '',
    ' ',
    '{',
    '{"title":',
    '{"title":"a","title":"b","body":"c"}',
    '{"title":1e999,"body":"x"}',
    '{"title":"t","body":"b","id":123456789012345678901234567890}',
    '{"__proto__":{"admin":true},"title":"t","body":"b"}',
    '{"constructor":{"prototype":{"admin":true}},"title":"t","body":"b"}',
    '\ufeff{"title":"t","body":"b"}',
    '{"title":"\\ud800","body":"\\u0000"}',
    '[]',
    'null',
    '"string"',
    '42',
    'true',
  ),
  fc.constant(null).map(() => `{"title":"t","body":"b","id":${'['.repeat(50_000)}${']'.repeat(50_000)}}`),
  fc.constant(null).map(() => `{"title":"t","body":"${'x'.repeat(1_100_000)}"}`),
  // Bytes that are not UTF-8 (a Latin-1 "é", a truncated sequence, an overlong "/").
  fc.constantFrom(
    Buffer.from([0x7b, 0x22, 0x74, 0x69, 0x74, 0x6c, 0x65, 0x22, 0x3a, 0x22, 0xe9, 0x22, 0x7d]),
    Buffer.from('{"title":"\xf0\x9f","body":"b"}', 'latin1'),
    Buffer.from('{"title":"\xc0\xaf","body":"b"}', 'latin1'),
  ),
);

const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=UTF-8',
  'application/json;charset="utf-8"',
  'APPLICATION/JSON',
  'application/json; charset=iso-8859-1',
  'application/json; charset=utf-16',
  'application/json; foo=bar',
  'application/merge-patch+json',
  'application/vnd.api+json',
  'application/jsonx',
  'text/json',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  ';;;=',
  '',
  undefined,
];

/** Query values: valid, out of range, huge, fractional, hexadecimal, injected, Unicode. */
const queryValue = fc.oneof(
  fc.integer({ min: -5, max: 120 }).map(String),
  fc.bigInt({ min: -(2n ** 80n), max: 2n ** 80n }).map(String),
  fc.constantFrom(
    '',
    '0',
    '01',
    '1.0',
    '1.5',
    '1e3',
    '0x10',
    ' 1',
    '1 ',
    '+1',
    '-0',
    'NaN',
    'Infinity',
    '9007199254740991',
    '9007199254740992',
    '9223372036854775807',
    '9223372036854775808',
    '1e400',
    'null',
    'true',
    '[]',
    '{}',
    'id',
    '-id',
    'title',
    '-title',
    'createdAt',
    'updatedAt',
    'name',
    '--id',
    'id desc',
    'id;DROP TABLE posts',
    "id' OR '1'='1",
    '1 OR 1=1',
    '1); DELETE FROM users; --',
    '$1',
    '%00',
    '\u0000',
    '😀',
    '\ud800',
    'é',
    'password_hash',
    'author_id',
  ),
  fc.string({ unit: char, maxLength: 8 }),
);
const QUERY_KEYS = [
  'sort',
  'page',
  'perPage',
  'after',
  'before',
  'limit',
  'author',
  'q',
  'fields',
  'include',
  'createdAfter',
  'Sort',
  'per_page',
  'offset',
  'constructor',
  '__proto__',
  'toString',
  'page[]',
  'a.b',
];
const queryString = fc
  .array(fc.tuple(fc.constantFrom(...QUERY_KEYS), queryValue, fc.boolean()), { maxLength: 4 })
  .map((pairs) =>
    // Mostly encoded; sometimes raw, as a careless client sends it (inject then encodes what it must).
    pairs
      .map(([k, v, encode]) =>
        encode
          ? `${encodeLoosely(k)}=${encodeLoosely(v)}`
          : `${k}=${v.replace(/[#&\s%]|[^\x00-\x7f]/gu, encodeLoosely)}`,
      )
      .join('&'),
  );

/** Path ids: canonical, out of range, non-canonical spellings of numbers, injections. */
const pathId = fc.oneof(
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
  fc.constantFrom(
    '0',
    '-1',
    '01',
    '1.0',
    '1e3',
    '0x1',
    '+1',
    ' 1',
    '9007199254740991',
    '9007199254740993',
    '99999999999999999999999',
    '1;DROP TABLE posts',
    "1' OR '1'='1",
    'null',
    'me',
    '😀',
    '%00',
    '\u0000',
    'é',
  ),
  fc.string({ unit: char, minLength: 1, maxLength: 6 }),
);

const headerValue = fc.oneof(
  fc.string({ unit: 'grapheme-ascii', maxLength: 30 }),
  fc.constantFrom(
    '',
    ' ',
    '*',
    'W/"x"',
    '"p1-1-0"',
    'Bearer',
    'Bearer ',
    'bearer pat_x',
    'Basic YTpi',
    'Bearer a b',
    `Bearer ${'A'.repeat(600)}`,
    'a'.repeat(2000),
    'null',
    '1; DROP TABLE tokens',
    'ümlaut',
  ),
);

/**
 * encodeURIComponent, except that a lone surrogate (which it refuses) becomes
 * the bytes a careless encoder would send for it: invalid UTF-8.
 */
function encodeLoosely(s: string): string {
  return [...s]
    .map((c) => {
      if (!/\p{Cs}/u.test(c)) return encodeURIComponent(c);
      const u = c.charCodeAt(0);
      return [0xe0 | (u >> 12), 0x80 | ((u >> 6) & 0x3f), 0x80 | (u & 0x3f)]
        .map((b) => `%${b.toString(16).toUpperCase()}`)
        .join('');
    })
    .join('');
}

/** A new token for that user, issued without the cost of a log-in. */
async function freshTokenFor(t: TestApp, user: SignedUp): Promise<{ authorization: string }> {
  const { token, hash } = newToken();
  await tokensRepository(t.app.db).create(user.user.id, hash, 600);
  return { authorization: `Bearer ${token}` };
}

// ---------------------------------------------------------------- what is sent where, from the document

/**
 * The operations whose field rules a property under "bodies" predicts exactly (the status, the fields blamed, what
 * reads back). Every other operation that takes a body is in FIELD_RULES_ELSEWHERE, with where its rules are tested:
 * a new resource's create and change are in neither, and fail "reaches every operation…" until one or the other is
 * written. The raw bodies and the path ids need no entry: they go to every operation the document has.
 */
const FIELD_RULES_FUZZED = [
  'createPost',
  'updatePost',
  'replacePost',
  'createComment',
  'updateComment',
  'updateUser',
  'createUser',
  'createToken',
];
const FIELD_RULES_ELSEWHERE: Record<string, string> = {
  createWebhook: 'a URL policy and event types, not text limits: test/integration/webhooks.test.ts, POST /webhooks',
  updateWebhook: 'the same, and a status: test/integration/webhooks.test.ts, PATCH and DELETE /webhooks/{id}',
};

/** Lists that take `limit` but no `sort`: cursor feeds of their own shape, which the list properties leave out. */
const OTHER_LISTS: Record<string, string> = {
  listEvents: 'the change feed; its type, post, after and limit rules: test/integration/events-feed.test.ts',
  listWebhookDeliveries: 'newest first, cursor only: test/integration/webhooks.test.ts; its webhookId is fuzzed here',
};

/** A deletion's "existing" id: one that names nothing, so that no resource the properties share is deleted. */
const ABSENT = 987_654_321;

/** Whether `{}` breaks the body's schema: a member is required (a create, a PUT), or any one (a change). */
function refusesEmpty(operation: Operation): boolean {
  const schema = Object.values(operation.requestBody?.content ?? {})[0]?.schema;
  if (!schema) return false;
  return (schema.required?.length ?? 0) > 0 || (schema.minProperties ?? 0) > 0;
}

type Method = NonNullable<InjectOptions['method']>;

// ---------------------------------------------------------------- the suite

interface Budget {
  /** Runs of each property. */
  numRuns: number;
  /** Runs of properties whose valid cases hash a password (~100 ms each). */
  hashingRuns: number;
}

export function defineFuzzSuite({ numRuns, hashingRuns }: Budget) {
  // No webhook worker: the suite registers a webhook to reach its routes, and must not send it events.
  const t = useTestApp({ WEBHOOK_CONCURRENCY: '0' });
  const ann = t.user({ name: 'Ann' });
  const bob = t.user({ name: 'Bob' });
  const root = t.admin({ name: 'Root' });
  const dan = t.user({ name: 'Dan' }); // sends the deletions at random ids: his tokens are all he can delete
  let postId: number;
  let commentId: number;
  /** The document the app builds from its routes: what the properties send requests to. */
  let doc: Document;
  /** An id that exists for each path parameter, by name, from the resources created below. */
  let ids: Record<string, number>;
  /** `PATCH /posts/{postId}`… as the derived properties send them, for the check that none was left out. */
  const sent = new Set<string>();
  const inject = async (options: InjectOptions) => {
    const res = (await t.app.inject(options)) as unknown as AnyResponse & { json(): any };
    expectContractResponse(res, { request: options, method: options.method });
    return res;
  };
  const runs = (n: number) => ({ numRuns: n });
  const freshToken = (user: SignedUp) => freshTokenFor(t, user);

  beforeAll(async () => {
    postId = (await createPost(t.app, ann, { title: 'Fuzz target' })).id;
    commentId = (await createComment(t.app, ann, postId)).id;
    const webhook = await inject({
      method: 'POST',
      url: '/webhooks',
      headers: ann.auth,
      payload: { url: 'https://hooks.example.com/fuzz' },
    });
    expect(webhook.statusCode, webhook.body).toBe(201);
    const webhookId = webhook.json().id as number;
    // Queued in SQL: without a worker nothing fans events out to it.
    const { rows } = await t.app.db.query<{ id: string }>(
      'INSERT INTO webhook_deliveries (webhook_id, event_id) VALUES ($1, 1) RETURNING id',
      [webhookId],
    );
    // Dan's, as every token a deletion may name.
    const token = await tokensRepository(t.app.db).create(dan.user.id, newToken().hash, 600);
    ids = {
      postId,
      commentId,
      userId: ann.user.id,
      webhookId,
      deliveryId: Number(rows[0]!.id),
      tokenId: token.id,
    };
    doc = await openApiDocument(t.app);
  });

  const operations = () => operationsOf(doc);
  /** Every operation that takes a body, where it lives and whether it needs a token. */
  const bodyRoutes = () =>
    operations()
      .filter(({ operation }) => operation.requestBody)
      .map(({ method, path, endpoint, operation }) => ({
        endpoint,
        method: method as Method,
        url: fillPath(path, ids),
        auth: needsToken(doc, operation),
      }));
  /** Every list that takes `sort`, with its sort values (the `-` ones included) from the parameter's schema. */
  const lists = () =>
    operations().flatMap(({ method, path, endpoint, operation }) => {
      const sort = queryParameter(operation, 'sort');
      if (method !== 'GET' || !sort) return [];
      return [{ endpoint, url: fillPath(path, ids), sorts: sort.schema.enum ?? [] }];
    });
  /** Each path parameter of each operation: one to fuzz while the others name what exists. */
  const idTargets = () =>
    operations().flatMap((documented) =>
      pathParameters(documented.operation).map((param) => ({ ...documented, param })),
    );

  describe('coverage', () => {
    it('reaches every operation of the OpenAPI document that takes a body, a path id or a sort', () => {
      const problems: string[] = [];
      const operationIds = operations().map(({ operation }) => operation.operationId);
      for (const { endpoint, method, operation } of operations()) {
        const id = operation.operationId;
        for (const param of pathParameters(operation)) {
          if (ids[param] === undefined)
            problems.push(`${endpoint}: no {${param}} exists; the suite's beforeAll makes one`);
        }
        if (operation.requestBody && !FIELD_RULES_FUZZED.includes(id) && !Object.hasOwn(FIELD_RULES_ELSEWHERE, id)) {
          problems.push(`${endpoint} (${id}): no property under "bodies" fuzzes its field rules, nor is it excluded`);
        }
        const isList = method === 'GET' && queryParameter(operation, 'limit') !== undefined;
        if (isList && !queryParameter(operation, 'sort') && !Object.hasOwn(OTHER_LISTS, id)) {
          problems.push(`${endpoint} (${id}): a list without sort, neither fuzzed nor excluded`);
        }
        const sort = queryParameter(operation, 'sort');
        if (sort && !sort.schema.enum?.length) problems.push(`${endpoint}: its sort parameter lists no values`);
      }
      // An entry naming an operation the document lacks would excuse nothing, silently.
      for (const id of [...FIELD_RULES_FUZZED, ...Object.keys(FIELD_RULES_ELSEWHERE), ...Object.keys(OTHER_LISTS)]) {
        if (!operationIds.includes(id)) problems.push(`${id}: listed here, but the document has no such operation`);
      }
      expect(problems).toEqual([]);
    });
  });

  const actors = () => ({ owner: ann, other: bob, admin: root });
  const actor = fc.constantFrom('owner', 'other', 'admin') as fc.Arbitrary<'owner' | 'other' | 'admin'>;

  describe('bodies: the field rules decide the outcome, and what is accepted reads back unchanged', () => {
    const postRules = { title: { max: 200, required: true }, body: { max: 50_000, required: true } };
    const patchRules = { title: { max: 200, required: false }, body: { max: 50_000, required: false } };

    it('POST /posts', async () => {
      await fc.assert(
        fc.asyncProperty(bodyOf({ title: 200, body: 50_000 }), async (body) => {
          const res = await inject({ method: 'POST', url: '/posts', headers: ann.auth, payload: body });
          if (poisoned(body)) return void expect(res.statusCode, describeResponse(res, body)).toBe(400);
          const blamed = blamedFields(body, postRules);
          if (blamed.length) {
            expect(res.statusCode, describeResponse(res, body)).toBe(422);
            expect(Object.keys(res.json().fieldErrors).sort()).toEqual(blamed);
            return;
          }
          expect(res.statusCode, describeResponse(res, body)).toBe(201);
          const read = await inject({ method: 'GET', url: `/posts/${res.json().id}` });
          expect([read.json().title, read.json().body]).toEqual([body.title, body.body]);
        }),
        {
          ...runs(numRuns),
          // Always tried, whatever the seed: the limits in 4-byte characters, and each rule's edge.
          examples: [
            [{ title: '😀'.repeat(200), body: '𝄞'.repeat(50_000) }],
            [{ title: '😀'.repeat(201), body: 'b' }],
            [{ title: 'e\u0301'.repeat(100), body: '\u202eRTL \u05d0\u05d1 👨‍👩‍👧' }],
            [{ title: 'a\u0000b', body: 'b' }],
            [{ title: 'a', body: '\ud800' }],
            [{ title: '\u0085\u3000\ufeff', body: 'b' }],
            [{ title: 't', body: 'b', constructor: 1 }],
          ],
        },
      );
    });

    it('PATCH and PUT /posts/{postId}: 422 before 404 before 403', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.boolean(),
          actor,
          fc.boolean(),
          bodyOf({ title: 200, body: 50_000 }),
          async (put, who, missing, body) => {
            const before = (await inject({ method: 'GET', url: `/posts/${postId}` })).json();
            const url = `/posts/${missing ? 987_654_321 : postId}`;
            const res = await inject({
              method: put ? 'PUT' : 'PATCH',
              url,
              headers: actors()[who].auth,
              payload: body,
            });
            const blamed = blamedFields(body, put ? postRules : patchRules);
            const expected = poisoned(body) ? 400 : blamed.length ? 422 : missing ? 404 : who === 'other' ? 403 : 200;
            expect(res.statusCode, describeResponse(res, { put, who, body })).toBe(expected);
            if (expected === 422) expect(Object.keys(res.json().fieldErrors).sort()).toEqual(blamed);
            const after = (await inject({ method: 'GET', url: `/posts/${postId}` })).json();
            const changed = expected === 200 && !missing;
            expect([after.title, after.body]).toEqual([
              changed ? (body.title ?? before.title) : before.title,
              changed ? (body.body ?? before.body) : before.body,
            ]);
          },
        ),
        runs(numRuns),
      );
    });

    it('POST and PATCH comments', async () => {
      await fc.assert(
        fc.asyncProperty(fc.boolean(), actor, bodyOf({ body: 10_000 }), async (patch, who, body) => {
          const url = patch ? `/posts/${postId}/comments/${commentId}` : `/posts/${postId}/comments`;
          const res = await inject({
            method: patch ? 'PATCH' : 'POST',
            url,
            headers: actors()[who].auth,
            payload: body,
          });
          const blamed = blamedFields(body, { body: { max: 10_000, required: !patch } });
          const expected = poisoned(body) ? 400 : blamed.length ? 422 : !patch ? 201 : who === 'other' ? 403 : 200;
          expect(res.statusCode, describeResponse(res, { patch, who, body })).toBe(expected);
          if (expected === 422) expect(Object.keys(res.json().fieldErrors).sort()).toEqual(blamed);
          if (expected === 201 || expected === 200) {
            const read = await inject({ method: 'GET', url: `/posts/${postId}/comments/${res.json().id}` });
            if (body.body !== undefined) expect(read.json().body).toBe(body.body);
          }
        }),
        runs(numRuns),
      );
    });

    it('PATCH /users/{userId}: name rules, e-mail shape, uniqueness (409 on a taken one, in any case)', async () => {
      const email = fc.oneof(
        fc.nat().map((n) => ({
          value: `fuzz-${n}-${Math.random().toString(36).slice(2)}@example.com`,
          kind: 'new' as const,
        })),
        fc.constant(null).map(() => ({ value: bob.user.email.toUpperCase(), kind: 'taken' as const })),
        fc
          .constantFrom('no-at-sign', 'a@', '@b.c', 'a b@c.d', 'a\u0000@b.cd', `${'a'.repeat(250)}@b.cd`, '')
          .map((value) => ({ value, kind: 'invalid' as const })),
        fc.string({ unit: char, maxLength: 12 }).map((value) => ({ value, kind: 'unknown' as const })),
      );
      await fc.assert(
        fc.asyncProperty(
          actor,
          fc.option(fieldValue(100), { nil: undefined }),
          fc.option(email, { nil: undefined }),
          fc.option(fc.oneof(fc.string({ maxLength: 7 }), notAString), { freq: 5, nil: undefined }),
          async (who, name, mail, password) => {
            const body: Record<string, unknown> = {};
            if (name !== undefined) body.name = name;
            if (mail !== undefined) body.email = mail.value;
            if (password !== undefined) body.password = password; // never valid: a valid one would cost a hash
            const res = await inject({
              method: 'PATCH',
              url: `/users/${ann.user.id}`,
              headers: actors()[who].auth,
              payload: body,
            });
            const context = describeResponse(res, { who, body });
            if (poisoned(body)) return void expect(res.statusCode, context).toBe(400);
            const nameBad = name !== undefined && !textIsValid(name, 100);
            const mailBad = mail?.kind === 'invalid';
            if (nameBad || mailBad || password !== undefined) {
              expect(res.statusCode, context).toBe(422);
              const fields = Object.keys(res.json().fieldErrors);
              if (nameBad) expect(fields, context).toContain('name');
              if (mailBad) expect(fields, context).toContain('email');
              return;
            }
            if (mail?.kind === 'unknown') return void expect([200, 403, 409, 422], context).toContain(res.statusCode);
            if (who === 'other') return void expect(res.statusCode, context).toBe(403);
            if (mail?.kind === 'taken') {
              expect(res.statusCode, context).toBe(409);
              return void expect(res.json().fieldErrors).toEqual({ email: ['is already registered'] });
            }
            expect(res.statusCode, context).toBe(200);
            if (name !== undefined) expect(res.json().name).toBe(name);
          },
        ),
        runs(numRuns),
      );
    });

    it('POST /users (sign-up) and POST /tokens (log-in)', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.boolean(),
          fieldValue(100),
          fc.oneof(
            fc.nat().map((n) => `signup-${n}-${Math.random().toString(36).slice(2)}@example.com`),
            fc.string({ unit: char, maxLength: 12 }),
            notAString,
          ),
          fc.oneof(fc.constant('long-enough-password'), fc.string({ unit: char, maxLength: 12 }), notAString),
          async (login, name, email, password) => {
            const payload = login ? { email, password } : { name, email, password };
            const res = await inject({ method: 'POST', url: login ? '/tokens' : '/users', payload });
            if (poisoned(payload)) return void expect(res.statusCode, describeResponse(res, payload)).toBe(400);
            expect([201, 401, 409, 422], describeResponse(res, payload)).toContain(res.statusCode);
            if (!login && res.statusCode === 201) expect(res.json().name).toBe(name);
            if (!login && !textIsValid(name, 100)) expect(res.statusCode, describeResponse(res, payload)).toBe(422);
          },
        ),
        runs(hashingRuns),
      );
    });
  });

  describe('raw bodies and content types, on every route that takes a body', () => {
    it('parse failures are 400, foreign media types and charsets 415, oversize 413; never a 500', async () => {
      const routes = bodyRoutes();
      await fc.assert(
        fc.asyncProperty(
          fc.nat(routes.length - 1),
          rawBody,
          fc.constantFrom(...CONTENT_TYPES),
          fc.boolean(),
          async (i, payload, contentType, anonymous) => {
            const route = routes[i]!;
            sent.add(route.endpoint);
            const headers: Record<string, string> = anonymous ? {} : { ...ann.auth };
            if (contentType !== undefined) headers['content-type'] = contentType;
            const res = await inject({ method: route.method, url: route.url, headers, payload });
            const context = describeResponse(res, {
              route: route.endpoint,
              url: route.url,
              contentType,
              payload: String(payload).slice(0, 200),
            });
            if (route.auth && anonymous) return void expect(res.statusCode, context).toBe(401);
            const mediaType = contentType?.split(';')[0]?.trim().toLowerCase();
            const charset = /charset="?([^";]+)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
            const json =
              mediaType === 'application/json' ||
              (mediaType === 'application/merge-patch+json' && route.method === 'PATCH');
            const oversized = Buffer.byteLength(payload) > 1_048_576;
            // 400, 413 and 415 rank alike (docs/api.md §2): an oversized body of a foreign type may get either.
            if (!json || (charset !== undefined && charset !== 'utf-8'))
              return void expect(oversized ? [413, 415] : [400, 415], context).toContain(res.statusCode);
            if (oversized) return void expect(res.statusCode, context).toBe(413);
            let parsed: unknown;
            try {
              parsed =
                typeof payload === 'string'
                  ? JSON.parse(payload.replace(/^\ufeff/, ''))
                  : new TextDecoder('utf-8', { fatal: true }).decode(payload) && undefined;
            } catch {
              return void expect(res.statusCode, context).toBe(400);
            }
            if (parsed !== undefined && (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)))
              return void expect(res.statusCode, context).toBe(400);
            expect([200, 201, 400, 401, 403, 409, 422], context).toContain(res.statusCode);
          },
        ),
        {
          ...runs(numRuns),
          // Every route at least once, whatever the seed: well-formed JSON, as a client with a token sends it.
          examples: routes.map((_, i): [number, string, string, boolean] => [
            i,
            '{"title":"t","body":"b"}',
            'application/json',
            false,
          ]),
        },
      );
    });
  });

  describe('query parameters of every list', () => {
    it('anything: 200 or 422 naming only parameters that were sent', async () => {
      const urls = lists();
      await fc.assert(
        fc.asyncProperty(fc.nat(urls.length - 1), queryString, async (i, query) => {
          const { endpoint, url } = urls[i]!;
          sent.add(endpoint);
          const res = await inject({ method: 'GET', url: `${url}?${query}`, headers: ann.auth });
          const context = describeResponse(res, { url, query });
          expect([200, 422], context).toContain(res.statusCode);
          if (res.statusCode === 200) {
            const keys = Object.keys(res.json()).sort();
            const envelopes = [
              ['data', 'page', 'perPage', 'total', 'totalPages'],
              ['data', 'page', 'perPage', 'total', 'totalEstimated', 'totalPages'],
              ['data', 'hasMore', 'limit', 'nextCursor', 'prevCursor'],
            ];
            expect(envelopes, context).toContainEqual(keys);
            return;
          }
          const given = new URLSearchParams(query);
          for (const field of Object.keys(res.json().fieldErrors))
            expect(given.has(field) || field === '(root)', context).toBe(true);
        }),
        // Every list at least once, whatever the seed.
        { ...runs(numRuns), examples: urls.map((_, i): [number, string] => [i, '']) },
      );
    });

    it('valid values: always 200 in the mode they select', async () => {
      const sortable = lists();
      // Each list's sort values, the descending ones included, are its sort parameter's enum in the document.
      const most = Math.max(...sortable.map(({ sorts }) => sorts.length));
      await fc.assert(
        fc.asyncProperty(
          fc.nat(sortable.length - 1),
          fc.boolean(),
          fc.nat(most - 1),
          fc.integer({ min: 1, max: 100 }),
          fc.integer({ min: 1, max: 100_000 }),
          async (i, cursor, s, size, page) => {
            const { endpoint, url, sorts } = sortable[i]!;
            sent.add(endpoint);
            const sort = sorts[s % sorts.length]!;
            const first = (await inject({ method: 'GET', url, headers: ann.auth })).json().data as { id: number }[];
            const query = cursor
              ? `sort=${sort}&limit=${size}${first[0] ? `&after=${first[0].id}` : ''}`
              : `sort=${sort}&page=${page}&perPage=${size}`;
            const res = await inject({ method: 'GET', url: `${url}?${query}`, headers: ann.auth });
            expect(res.statusCode, describeResponse(res, { url, query })).toBe(200);
            expect('nextCursor' in res.json()).toBe(cursor);
          },
        ),
        // Pages of up to 100 posts with 50 000-character bodies are costly to serve; the domain is small.
        runs(Math.min(numRuns, 300)),
      );
    });

    it('a parameter sent twice is a 422 naming it', async () => {
      const urls = lists();
      await fc.assert(
        fc.asyncProperty(
          fc.nat(urls.length - 1),
          fc.constantFrom('sort', 'page', 'perPage', 'after', 'limit'),
          async (i, key) => {
            const value = key === 'sort' ? 'id' : '1';
            const res = await inject({
              method: 'GET',
              url: `${urls[i]!.url}?${key}=${value}&${key}=${value}`,
              headers: ann.auth,
            });
            expect(res.statusCode).toBe(422);
            expect(Object.keys(res.json().fieldErrors)).toContain(key);
          },
        ),
        runs(Math.min(numRuns, 25)),
      );
    });
  });

  describe('path ids', () => {
    it('only a canonical positive integer can name a resource; anything else is 404 (422 first for a bad body, 400 for a malformed URL)', async () => {
      const targets = idTargets();
      const EXISTING = '(existing)';
      const id = fc.oneof(fc.constant(EXISTING), pathId);
      await fc.assert(
        fc.asyncProperty(
          fc.nat(targets.length - 1),
          fc.boolean(),
          fc.boolean(),
          id,
          async (i, head, encode, generated) => {
            const { endpoint, path, operation, param, method: documented } = targets[i]!;
            sent.add(endpoint);
            // Fastify answers HEAD wherever it answers GET; the document does not list it apart.
            const method = (head && documented === 'GET' ? 'HEAD' : documented) as Method;
            // A deletion's existing id names nothing, and Dan sends it with a token of his own: whatever id comes
            // up, he owns nothing but his tokens, so no resource or session the other properties use goes.
            const deletion = method === 'DELETE';
            const existing = deletion ? ABSENT : ids[param]!;
            const raw = generated === EXISTING ? String(existing) : generated;
            const segment = encode ? encodeLoosely(raw) : raw.replace(/[/?#\s]|[^\x00-\x7f]/gu, encodeLoosely);
            const headers = deletion ? await freshToken(dan) : ann.auth;
            // Where a body is taken it is `{}`: a 422 where its schema wants a member, which ranks before 404.
            const bodyInvalid = refusesEmpty(operation);
            const res = await inject({
              method,
              url: fillPath(path, { ...ids, [param]: segment }),
              headers,
              ...(operation.requestBody ? { payload: {} } : {}),
            });
            const context = describeResponse(res, { route: endpoint, method, param, raw, segment });
            const canonical = /^[1-9][0-9]*$/.test(raw) && Number(raw) <= Number.MAX_SAFE_INTEGER;
            // A segment that spells a path of its own (/users/me) is that route: its answer to the method, or a
            // 405 for one it lacks (docs/api.md §4).
            const literal = fillPath(path, { ...ids, [param]: raw });
            if (Object.hasOwn(doc.paths, literal)) {
              const answering = doc.paths[literal]![method === 'HEAD' ? 'get' : method.toLowerCase()];
              const expected = answering ? successes(answering)[0] : 405;
              return void expect(res.statusCode, context).toBe(expected);
            }
            // Sent raw, some segments change the path itself (a backslash is a slash to URL parsers): no route, 404.
            if (bodyInvalid)
              return void expect(encode ? [400, 422] : [400, 404, 422], context).toContain(res.statusCode);
            if (!canonical) return void expect([400, 404], context).toContain(res.statusCode);
            // 403 for what another user owns, 404 for what does not exist, else the operation's documented success.
            expect([...successes(operation), 403, 404], context).toContain(res.statusCode);
          },
        ),
        {
          ...runs(numRuns),
          // Every operation and parameter at least once, whatever the seed, with the id that exists.
          examples: targets.map((_, i): [number, boolean, boolean, string] => [i, false, true, EXISTING]),
        },
      );
    });
  });

  describe('headers', () => {
    it('whatever the Authorization, X-Request-Id, Accept, If-Match, If-None-Match and Idempotency-Key: no 500', async () => {
      const routes = () => [
        { method: 'GET', url: '/posts' },
        { method: 'GET', url: `/posts/${postId}` },
        { method: 'POST', url: '/posts', payload: { title: 'from the header fuzz', body: 'b' } },
        { method: 'PATCH', url: `/posts/${postId}`, payload: {} },
        { method: 'POST', url: `/posts/${postId}/comments`, payload: { body: 'from the header fuzz' } },
        { method: 'GET', url: '/users/me' },
        { method: 'GET', url: '/no/such/route' },
      ];
      const headerNames = [
        'authorization',
        'x-request-id',
        'accept',
        'if-match',
        'if-none-match',
        'idempotency-key',
        'accept-encoding',
        'x-forwarded-for',
        'origin',
      ];
      await fc.assert(
        fc.asyncProperty(
          fc.nat(6),
          fc.dictionary(fc.constantFrom(...headerNames), headerValue, { maxKeys: 4 }),
          fc.boolean(),
          async (i, headers, withToken) => {
            const route = routes()[i]!;
            const all: Record<string, string> = {
              ...(withToken && !('authorization' in headers) ? ann.auth : {}),
              ...headers,
            };
            const res = await inject({
              method: route.method,
              url: route.url,
              headers: all,
              ...(route.payload ? { payload: route.payload } : {}),
            });
            const context = describeResponse(res, { route, headers: all });
            expect([200, 201, 304, 401, 403, 404, 409, 412, 422], context).toContain(res.statusCode);
            const id = all['x-request-id'];
            if (id !== undefined && /^[A-Za-z0-9._:-]{1,128}$/.test(id))
              expect(res.headers['x-request-id'], context).toBe(id);
          },
        ),
        runs(numRuns),
      );
    });
  });

  describe('afterwards', () => {
    it('sent every operation that takes a body or a path id, and every list that takes sort', () => {
      const expected = operations()
        .filter(
          ({ method, operation }) =>
            operation.requestBody ||
            pathParameters(operation).length > 0 ||
            (method === 'GET' && queryParameter(operation, 'sort')),
        )
        .map(({ endpoint }) => endpoint);
      expect(
        expected.filter((endpoint) => !sent.has(endpoint)),
        'operations of the document the properties never sent',
      ).toEqual([]);
    });

    it('nothing stored breaks the contract’s rules (checked in SQL)', async () => {
      const { rows } = await t.app.db.query<{ what: string }>(`
        SELECT 'post ' || id AS what FROM posts
          WHERE char_length(title) NOT BETWEEN 1 AND 200 OR title !~ ${SQL_NOT_BLANK}
             OR char_length(body) NOT BETWEEN 1 AND 50000 OR body !~ ${SQL_NOT_BLANK}
        UNION ALL
        SELECT 'comment ' || id FROM comments WHERE char_length(body) NOT BETWEEN 1 AND 10000 OR body !~ ${SQL_NOT_BLANK}
        UNION ALL
        SELECT 'user ' || id FROM users
          WHERE char_length(name) NOT BETWEEN 1 AND 100 OR name !~ ${SQL_NOT_BLANK}
             OR char_length(email) > 254 OR email !~ '^[^@[:space:]]+@[^@[:space:]]+$'`);
      expect(rows).toEqual([]);
      // The run did store things, including non-ASCII ones: the check looked at real data.
      const { rows: counts } = await t.app.db.query<{ posts: number; unicode: number }>(
        `SELECT count(*)::int AS posts, count(*) FILTER (WHERE title ~ '[^\\x01-\\x7f]')::int AS unicode FROM posts`,
      );
      expect(counts[0]!.posts).toBeGreaterThan(1);
      expect(counts[0]!.unicode).toBeGreaterThan(0);
    });

    it('tokens and sessions still work after the run', async () => {
      // The fuzz never sent a valid new password, so Ann's token survived.
      const me = await inject({ method: 'GET', url: '/users/me', headers: ann.auth });
      expect(me.statusCode).toBe(200);
      const { token, hash } = newToken();
      const issued = await tokensRepository(t.app.db).create(ann.user.id, hash, 60);
      expect(
        (await inject({ method: 'DELETE', url: `/tokens/${issued.id}`, headers: { authorization: `Bearer ${token}` } }))
          .statusCode,
      ).toBe(204);
    });
  });
}
