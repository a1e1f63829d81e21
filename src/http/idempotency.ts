/**
 * Creating through POST, with Idempotency-Key (docs/api.md §8): the one mechanism
 * behind POST /posts, POST /posts/{postId}/comments and POST /users, from the
 * header's contract (`IdempotentHeaders`) and the 201's (`Created`) to the
 * replay. Its SQL is in src/repositories/idempotency-keys.ts; expired records
 * are purged by src/plugins/retention.ts.
 *
 * The create runs in a transaction that first takes the key's advisory lock
 * without waiting (taken elsewhere: the first request is still running, 409),
 * then looks for the stored first response (same request: replayed with
 * `Idempotent-Replayed: true`; another request: 422), else creates and stores
 * the response in that same transaction. So a create and its record commit
 * together, and a failed create (any error) stores nothing and may be retried.
 *
 * Keys are scoped per user (`user:<id>`); a request without a token (sign-up)
 * uses the one `anonymous` scope. Two requests are the same when they ask for
 * the same thing: method, route, path ids and the members the operation uses,
 * compared by a SHA-256 of that flat form. Read-only members, which the
 * operation ignores, do not count, so no walk over a client's arbitrary JSON
 * (of any depth) happens here.
 *
 * Cost order: a replay, or a key in use, is answered from one cheap statement
 * before anything expensive. A password sent with the request (sign-up) is
 * hashed once, after every cheaper check (`precheck`, e.g. the e-mail is
 * taken: 409), by the one password helper (src/security.ts); the record keeps
 * that hash, and a retry is checked against it with one verification, so the
 * password never enters the request hash and is never hashed twice. (Only two
 * identical requests racing past the first check pay one extra verification.)
 *
 * A record whose resource has since been deleted keeps no copy of it (a
 * trigger drops the body): its replay is a 409 naming what was created and
 * that it is gone; the key stays spent, so a retry never creates it again.
 */
import { createHash } from 'node:crypto';
import { Type, type TSchema } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { retryingConflicts, withTransaction, type Queryable } from '../db/pool.js';
import { linkTo } from './links.js';
import { conflict, validation } from '../errors.js';
import { hashPassword, verifyPassword } from '../security.js';
import { JSON_MEDIA_TYPE } from '../media-types.js';
import { ETag } from '../schemas/common.js';
import { optionalHeaders } from '../schemas/conditional.js';
import { idempotencyKeysRepository, type IdempotencyRecord, type StoredResponse } from '../repositories/idempotency-keys.js';

export interface CreatedResource {
  id: number;
  etag: string;
  body: object;
}

export interface Creation {
  /** The kind of resource created, as records name it (`post`, `comment`, `user`). */
  kind: 'post' | 'comment' | 'user';
  /** What the request asks for: the body members the operation uses, flat. */
  input: Record<string, string | number | boolean | null | undefined>;
  /** A password to store hashed; the hash is handed to `create`. */
  password?: string;
  /** Cheap checks that must pass before the password is hashed. */
  precheck?: () => Promise<void>;
  /**
   * Makes the resource with one statement on `db`: the pool in autocommit when
   * there is no Idempotency-Key, the transaction that also stores the record otherwise.
   */
  create(db: Queryable, passwordHash: string | undefined): Promise<CreatedResource>;
}

const IdempotencyKey = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\x20-\\x7E]*$',
  'x-errorMessage': 'must be printable ASCII characters',
  description:
    'makes a retry safe: the same key with the same body within 24 h returns the first response (Idempotent-Replayed: true) ' +
    'and creates nothing; with another body it is a 422; while the first request runs, a 409. Keys are per user ' +
    '(per token owner; sign-ups without a token share one anonymous scope). 1–255 printable ASCII characters.',
});

/** The request headers of a create: Idempotency-Key, optional. */
export const IdempotentHeaders = optionalHeaders({ 'idempotency-key': IdempotencyKey });

/** A created resource: 201 with Location and ETag; a replay of it also says so. */
export const Created = <T extends TSchema>(schema: T, description: string) =>
  Type.Ref(schema, {
    description,
    headers: {
      Location: { type: 'string', pattern: '^[!-~]+$', maxLength: 2048, description: 'the URL of the new resource' },
      ETag,
      'Idempotent-Replayed': {
        type: 'string',
        enum: ['true'],
        description: 'present when this is the stored first response to an earlier request with the same Idempotency-Key',
      },
    },
  });

const FIELD = 'Idempotency-Key';

function fingerprint(request: FastifyRequest, input: Creation['input']): Buffer {
  const members = Object.keys(input)
    .sort()
    .map((name) => [name, input[name] ?? null]);
  const form = JSON.stringify([request.method, request.routeOptions.url, request.params, members]);
  return createHash('sha256').update(form).digest();
}

const inUse = () =>
  conflict('a request with this Idempotency-Key is still being processed; retry later', {
    [FIELD]: ['is in use by a request still being processed'],
  });

/** The first response again, if this request is the one that key was first used for. */
async function replay(record: IdempotencyRecord, requestHash: Buffer, creation: Creation): Promise<StoredResponse> {
  const samePassword =
    record.secretHash === null
      ? creation.password === undefined
      : creation.password !== undefined && (await verifyPassword(creation.password, record.secretHash));
  if (!record.requestHash.equals(requestHash) || !samePassword) {
    throw validation({ [FIELD]: ['was already used for a different request'] });
  }
  if (record.body === null) {
    const [kind, id] = (record.resource ?? ':').split(':');
    throw conflict(`${kind} ${id}, created by the first request with this Idempotency-Key, has since been deleted`, {
      [FIELD]: [`was used to create ${kind} ${id}, which has since been deleted`],
    });
  }
  return { status: record.status, headers: record.headers, body: record.body };
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
export async function createOnce(request: FastifyRequest, reply: FastifyReply, creation: Creation): Promise<FastifyReply> {
  const db = request.server.db;
  const respond = async (db: Queryable, passwordHash: string | undefined) => {
    const created = await creation.create(db, passwordHash);
    const headers = { location: linkTo(request, `/${created.id}`), etag: created.etag, 'content-type': JSON_MEDIA_TYPE };
    // Serialized by the route's 201 schema now, so a replay sends these exact bytes.
    const body = reply.serializeInput(created.body as Record<string, unknown>, '201') as string;
    return { id: created.id, response: { status: 201, headers, body } satisfies StoredResponse };
  };
  const prepare = async () => {
    await creation.precheck?.();
    return creation.password === undefined ? undefined : hashPassword(creation.password);
  };

  // Validated by the route's headers schema (IdempotentHeaders).
  const key = request.headers['idempotency-key'] as string | undefined;
  if (key === undefined) {
    // No record to keep with it: the create is one statement, committed on its own.
    const passwordHash = await prepare();
    return send(reply, (await retryingConflicts(() => respond(db, passwordHash))).response, false);
  }

  const scope = request.user ? `user:${request.user.id}` : 'anonymous';
  const requestHash = fingerprint(request, creation.input);
  const earlier = await idempotencyKeysRepository(db).peek(scope, key);
  if (earlier.record) return send(reply, await replay(earlier.record, requestHash, creation), true);
  if (earlier.inUse) throw inUse();

  const passwordHash = await prepare();
  const outcome = await withTransaction(db, async (tx) => {
    const keys = idempotencyKeysRepository(tx);
    if (!(await keys.tryLock(scope, key))) throw inUse();
    // Stored since the first check by an identical request racing this one.
    const stored = await keys.find(scope, key);
    if (stored) return { stored };
    const { id, response: fresh } = await respond(tx, passwordHash);
    await keys.save({ scope, key, requestHash, resource: `${creation.kind}:${id}`, secretHash: passwordHash ?? null, ...fresh });
    return { fresh };
  });
  if (outcome.stored) return send(reply, await replay(outcome.stored, requestHash, creation), true);
  return send(reply, outcome.fresh, false);
}
