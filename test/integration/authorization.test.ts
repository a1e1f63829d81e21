/**
 * The authorization matrix (issue 9): every write endpoint, and every read that
 * needs a token, against every kind of caller — anonymous, another user, the
 * owner, an admin, the owner's expired token, the owner's revoked token, and for
 * comment PATCH/DELETE the post's author — gives exactly the contract's status
 * (docs/api.md §4, §6). One table; each case gets fresh resources, so a DELETE in one
 * row cannot change the outcome of another. The rows are written by hand, for
 * they hold the expected statuses; which rows there must be is not: it is read
 * from the OpenAPI document the app builds from its routes (issue 45), so an
 * operation that needs a token, a new resource's included, cannot go untested.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { newToken } from '../../src/security.js';
import { tokensRepository } from '../../src/repositories/tokens.js';
import { createComment, createPost, useTestApp } from '../helpers/factories.js';
import { describeResponse, expectContractResponse } from '../helpers/contract.js';
import { needsToken, openApiDocument, operationsOf } from '../helpers/operations.js';

// No webhook worker: the matrix queues deliveries by hand, and a retried one must not go out mid-test. Each
// webhook row creates the owner's webhooks afresh for every caller, more than the default cap of 20 allows.
const t = useTestApp({ WEBHOOK_CONCURRENCY: '0', WEBHOOK_MAX_PER_USER: '1000' });
/** Owns the resources under test; also the post's author unless a row says otherwise. */
const owner = t.user({ name: 'Owner' });
const other = t.user({ name: 'Other' });
const admin = t.admin({ name: 'Admin' });
/** Writes the post that the owner's comment is on (comment rows only). */
const postAuthor = t.user({ name: 'Post author' });
let expired: { authorization: string };
let revoked: { authorization: string };

beforeAll(async () => {
  const tokens = tokensRepository(t.app.db);
  // The owner's own tokens, one past its expiry and one revoked: credentials that were good once.
  const late = newToken();
  await tokens.create(owner.user.id, late.hash, -1);
  expired = { authorization: `Bearer ${late.token}` };
  const gone = newToken();
  const goneRow = await tokens.create(owner.user.id, gone.hash, 3600);
  await tokens.revoke(owner.user.id, goneRow.id);
  revoked = { authorization: `Bearer ${gone.token}` };
});

type Caller = 'anonymous' | 'other' | 'owner' | 'admin' | 'expired' | 'revoked' | 'postAuthor';

const headersOf = (caller: Caller): Record<string, string> =>
  ({
    anonymous: {},
    other: other.auth,
    owner: owner.auth,
    admin: admin.auth,
    expired,
    revoked,
    postAuthor: postAuthor.auth,
  })[caller];

/** The owner's comment on a post by postAuthor. */
async function ownersComment(): Promise<{ postId: number; commentId: number }> {
  const { id: postId } = await createPost(t.app, postAuthor);
  return { postId, commentId: (await createComment(t.app, owner, postId)).id };
}

/** Another live token of the owner, issued without a log-in's password hash. */
async function ownersSpareToken(): Promise<number> {
  return (await tokensRepository(t.app.db).create(owner.user.id, newToken().hash, 3600)).id;
}

/** A webhook of the owner's, registered as a client would. */
async function ownersWebhook(): Promise<number> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/webhooks',
    headers: owner.auth,
    payload: { url: 'https://hooks.example.com/in' },
  });
  expect(res.statusCode, res.body).toBe(201);
  return (res.json() as { id: number }).id;
}

/** A delivery of the owner's webhook, queued in SQL: without a worker nothing fans events out to it. */
async function ownersDelivery(): Promise<{ webhookId: number; deliveryId: number }> {
  const webhookId = await ownersWebhook();
  const { rows } = await t.app.db.query<{ id: string }>(
    'INSERT INTO webhook_deliveries (webhook_id, event_id) VALUES ($1, 1) RETURNING id',
    [webhookId],
  );
  return { webhookId, deliveryId: Number(rows[0]!.id) };
}

interface Row {
  endpoint: string;
  /** Builds the request on fresh resources. */
  request(): Promise<{ method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'; url: string; payload?: object }>;
  expected: Partial<Record<Caller, number>>;
}

const unauthenticated = { anonymous: 401, expired: 401, revoked: 401 } as const;

const MATRIX: Row[] = [
  {
    endpoint: 'POST /posts',
    request: async () => ({ method: 'POST', url: '/posts', payload: { title: 't', body: 'b' } }),
    expected: { ...unauthenticated, other: 201, owner: 201, admin: 201 },
  },
  {
    endpoint: 'PATCH /posts/{postId}',
    request: async () => ({
      method: 'PATCH',
      url: `/posts/${(await createPost(t.app, owner)).id}`,
      payload: { title: 'changed' },
    }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'PUT /posts/{postId}',
    request: async () => ({
      method: 'PUT',
      url: `/posts/${(await createPost(t.app, owner)).id}`,
      payload: { title: 'put', body: 'put' },
    }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'DELETE /posts/{postId}',
    request: async () => ({ method: 'DELETE', url: `/posts/${(await createPost(t.app, owner)).id}` }),
    expected: { ...unauthenticated, other: 403, owner: 204, admin: 204 },
  },
  {
    endpoint: 'POST /posts/{postId}/comments',
    request: async () => ({
      method: 'POST',
      url: `/posts/${(await createPost(t.app, postAuthor)).id}/comments`,
      payload: { body: 'c' },
    }),
    expected: { ...unauthenticated, other: 201, owner: 201, admin: 201, postAuthor: 201 },
  },
  {
    endpoint: 'PATCH /posts/{postId}/comments/{commentId}',
    request: async () => {
      const { postId, commentId } = await ownersComment();
      return { method: 'PATCH', url: `/posts/${postId}/comments/${commentId}`, payload: { body: 'changed' } };
    },
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200, postAuthor: 403 },
  },
  {
    endpoint: 'DELETE /posts/{postId}/comments/{commentId}',
    request: async () => {
      const { postId, commentId } = await ownersComment();
      return { method: 'DELETE', url: `/posts/${postId}/comments/${commentId}` };
    },
    expected: { ...unauthenticated, other: 403, owner: 204, admin: 204, postAuthor: 204 },
  },
  {
    endpoint: 'PATCH /users/{userId}',
    request: async () => ({ method: 'PATCH', url: `/users/${owner.user.id}`, payload: { name: 'Owner' } }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'GET /users/me',
    request: async () => ({ method: 'GET', url: '/users/me' }),
    expected: { ...unauthenticated, other: 200, owner: 200, admin: 200 },
  },
  {
    endpoint: 'GET /tokens',
    request: async () => ({ method: 'GET', url: '/tokens' }),
    expected: { ...unauthenticated, other: 200, owner: 200, admin: 200 },
  },
  {
    // Another user's token is not theirs to know about: 404, admins included.
    endpoint: 'DELETE /tokens/{tokenId}',
    request: async () => ({ method: 'DELETE', url: `/tokens/${await ownersSpareToken()}` }),
    expected: { ...unauthenticated, other: 404, owner: 204, admin: 404 },
  },
  {
    endpoint: 'POST /webhooks',
    request: async () => ({ method: 'POST', url: '/webhooks', payload: { url: 'https://hooks.example.com/in' } }),
    expected: { ...unauthenticated, other: 201, owner: 201, admin: 201 },
  },
  {
    // Everyone may list; what each sees (their own, an admin everyone's) is webhooks.test.ts's subject.
    endpoint: 'GET /webhooks',
    request: async () => ({ method: 'GET', url: '/webhooks' }),
    expected: { ...unauthenticated, other: 200, owner: 200, admin: 200 },
  },
  {
    endpoint: 'GET /webhooks/{webhookId}',
    request: async () => ({ method: 'GET', url: `/webhooks/${await ownersWebhook()}` }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'PATCH /webhooks/{webhookId}',
    request: async () => ({
      method: 'PATCH',
      url: `/webhooks/${await ownersWebhook()}`,
      payload: { description: 'changed' },
    }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'DELETE /webhooks/{webhookId}',
    request: async () => ({ method: 'DELETE', url: `/webhooks/${await ownersWebhook()}` }),
    expected: { ...unauthenticated, other: 403, owner: 204, admin: 204 },
  },
  {
    endpoint: 'GET /webhooks/{webhookId}/deliveries',
    request: async () => ({ method: 'GET', url: `/webhooks/${(await ownersDelivery()).webhookId}/deliveries` }),
    expected: { ...unauthenticated, other: 403, owner: 200, admin: 200 },
  },
  {
    endpoint: 'POST /webhooks/{webhookId}/deliveries/{deliveryId}/retry',
    request: async () => {
      const { webhookId, deliveryId } = await ownersDelivery();
      return { method: 'POST', url: `/webhooks/${webhookId}/deliveries/${deliveryId}/retry` };
    },
    expected: { ...unauthenticated, other: 403, owner: 202, admin: 202 },
  },
];

const ERROR_CODE: Record<number, string> = { 401: 'unauthorized', 403: 'forbidden', 404: 'not_found' };
const cases = MATRIX.flatMap((row) =>
  (Object.entries(row.expected) as [Caller, number][]).map(([caller, status]) => ({ ...row, caller, status })),
);

describe('authorization matrix', () => {
  it.each(cases)('$endpoint as $caller: $status', async ({ request, caller, status }) => {
    const req = await request();
    const res = await t.app.inject({ ...req, headers: headersOf(caller) });
    expect(res.statusCode, describeResponse(res, { caller, ...req })).toBe(status);
    const error = expectContractResponse(res, { request: req });
    if (status >= 400) {
      expect(error?.error).toBe(ERROR_CODE[status]);
      // A missing token asks for one; a bad one says it is invalid (RFC 6750 §3).
      if (status === 401) {
        expect(res.headers['www-authenticate']).toBe(
          caller === 'anonymous' ? 'Bearer' : 'Bearer error="invalid_token"',
        );
      }
    }
  });

  it('covers every caller of every row: the table has no hole', () => {
    for (const row of MATRIX) {
      for (const caller of ['anonymous', 'other', 'owner', 'admin', 'expired', 'revoked'] as const) {
        expect(row.expected[caller], `${row.endpoint} as ${caller}`).toBeDefined();
      }
    }
    for (const endpoint of [
      'PATCH /posts/{postId}/comments/{commentId}',
      'DELETE /posts/{postId}/comments/{commentId}',
    ]) {
      expect(MATRIX.find((r) => r.endpoint === endpoint)?.expected.postAuthor).toBeDefined();
    }
  });

  it('has a row for every operation the OpenAPI document says needs a token, and no row for anything else', async () => {
    const doc = await openApiDocument(t.app);
    // `PATCH /posts/{postId}`…: the public operations declare security `[{}]`, anyone, token or not.
    const needToken = operationsOf(doc)
      .filter(({ operation }) => needsToken(doc, operation))
      .map(({ endpoint }) => endpoint);
    const rows = MATRIX.map((row) => row.endpoint);
    expect(
      needToken.filter((endpoint) => !rows.includes(endpoint)),
      'operations that need a token but have no row in MATRIX',
    ).toEqual([]);
    // A row for a public operation, or for one that no longer exists, would pass while testing nothing it claims.
    expect(
      rows.filter((endpoint) => !needToken.includes(endpoint)),
      'MATRIX rows that name no operation needing a token',
    ).toEqual([]);
  });

  it('what an allowed caller sees is their own: /users/me and /tokens', async () => {
    for (const who of [owner, other, admin]) {
      const me = await t.app.inject({ url: '/users/me', headers: who.auth });
      expect(me.json()).toMatchObject({ id: who.user.id, email: who.user.email });
      const tokens = await t.app.inject({ url: '/tokens?perPage=100', headers: who.auth });
      const { rows } = await t.app.db.query<{ id: number }>(
        'SELECT id FROM tokens WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > now() ORDER BY id',
        [who.user.id],
      );
      expect((tokens.json().data as { id: number }[]).map((tok) => tok.id)).toEqual(rows.map((r) => r.id));
    }
  });
});
