/**
 * Creating through POST, with Idempotency-Key (API.md §8): the one mechanism
 * behind POST /posts, POST /posts/{postId}/comments and POST /users.
 *
 * The create runs in a transaction that first takes the key's advisory lock
 * without waiting (taken elsewhere: the first request is still running, 409),
 * then looks for the stored first response (same request: replayed with
 * `Idempotent-Replayed: true`; another request: 422), else creates and stores
 * the response in that same transaction. So a create and its record commit
 * together, and a failed create (any error) stores nothing and may be retried.
 *
 * Keys are scoped per user (`user:<id>`); a request without a token (sign-up)
 * uses the one `anonymous` scope. The request is compared by a SHA-256 of its
 * canonical form (method, route, path params, body with members sorted); body
 * members named secret (the sign-up password) enter it only through a salted
 * scrypt, so a stored hash is no faster to guess a password from than the
 * password hash itself.
 */
import { createHash, scrypt } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { withTransaction, type Queryable } from '../db/pool.js';
import { conflict, validation } from '../errors.js';
import { idempotencyKeysRepository, type StoredResponse } from '../repositories/idempotency-keys.js';

export interface Created {
  id: number;
  etag: string;
  body: object;
}

const FIELD = 'Idempotency-Key';
const JSON_TYPE = 'application/json; charset=utf-8';
// As for passwords (src/security.ts): OWASP's scrypt parameters.
const SCRYPT = { N: 2 ** 15, r: 8, p: 3, maxmem: 256 * 2 ** 15 * 8 };

/** JSON with object members sorted, so members sent in another order are the same request. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

function slowHash(secret: string, salt: Buffer): Promise<string> {
  return new Promise((resolve, reject) =>
    scrypt(secret.normalize('NFC'), salt, 32, SCRYPT, (err, key) => (err ? reject(err) : resolve(key.toString('base64')))),
  );
}

async function fingerprint(request: FastifyRequest, scope: string, key: string, secretFields: readonly string[]) {
  const body = { ...(request.body as Record<string, unknown>) };
  const salt = createHash('sha256').update(`${scope}\0${key}`).digest();
  for (const field of secretFields) {
    const value = body[field];
    if (typeof value === 'string') body[field] = await slowHash(value, salt);
  }
  const form = JSON.stringify(canonical([request.method, request.routeOptions.url, request.params, body]));
  return createHash('sha256').update(form).digest();
}

function send(reply: FastifyReply, response: StoredResponse, replayed: boolean): FastifyReply {
  reply.code(response.status).headers(response.headers);
  if (replayed) reply.header('idempotent-replayed', 'true');
  return reply.send(response.body);
}

/**
 * Answers a POST with 201, Location and ETag for what `create` made with the
 * database handle it is given, at most once per Idempotency-Key.
 *
 * `create` must be one statement (atomic by itself): without a key it runs on
 * the pool, outside any transaction, which saves the BEGIN and COMMIT round
 * trips (and the database's work for them) on the common path; with a key it
 * runs in the transaction that also stores the response.
 */
export async function createOnce(
  request: FastifyRequest,
  reply: FastifyReply,
  create: (db: Queryable) => Promise<Created>,
  options: { secretFields?: readonly string[] } = {},
): Promise<FastifyReply> {
  const respond = async (db: Queryable): Promise<StoredResponse> => {
    const created = await create(db);
    const headers = { location: `${request.url.split('?')[0]}/${created.id}`, etag: created.etag, 'content-type': JSON_TYPE };
    // Serialized by the route's 201 schema now, so a replay sends these exact bytes.
    return { status: 201, headers, body: reply.serializeInput(created.body as Record<string, unknown>, '201') as string };
  };

  // Validated by the route's headers schema (IdempotentHeaders).
  const key = request.headers['idempotency-key'] as string | undefined;
  if (key === undefined) return send(reply, await respond(request.server.db), false);

  const scope = request.user ? `user:${request.user.id}` : 'anonymous';
  const requestHash = await fingerprint(request, scope, key, options.secretFields ?? []);
  const { response, replayed } = await withTransaction(request.server.db, async (tx) => {
    const keys = idempotencyKeysRepository(tx);
    if (!(await keys.tryLock(scope, key))) {
      throw conflict('a request with this Idempotency-Key is still being processed; retry later', {
        [FIELD]: ['is in use by a request still being processed'],
      });
    }
    const stored = await keys.find(scope, key);
    if (stored) {
      if (!stored.requestHash.equals(requestHash)) {
        throw validation({ [FIELD]: ['was already used for a different request'] });
      }
      const { status, headers, body } = stored;
      return { response: { status, headers, body }, replayed: true };
    }
    const fresh = await respond(tx);
    await keys.save({ scope, key, requestHash, ...fresh });
    return { response: fresh, replayed: false };
  });
  return send(reply, response, replayed);
}
