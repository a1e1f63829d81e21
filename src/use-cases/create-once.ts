/** Creating at most once per Idempotency-Key (docs/architecture.md, "Idempotent creates"). */
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { retryingConflicts, withTransaction, type Queryable } from '../db/pool.js';
import { linkTo } from '../http/links.js';
import { conflict, validation } from '../errors.js';
import { hashPassword, verifyPassword } from '../security.js';
import { JSON_MEDIA_TYPE } from '../media-types.js';
import {
  idempotencyKeysRepository,
  type IdempotencyRecord,
  type StoredResponse,
} from '../repositories/idempotency-keys.js';

export interface CreatedResource {
  id: number;
  etag: string;
  body: object;
}

export interface Creation {
  /** The resource's singular: its record is `<kind>:<id>`, the word its table's forget trigger passes. */
  kind: string;
  /** The body members the operation uses, flat. */
  input: Record<string, string | number | boolean | null | undefined>;
  password?: string;
  /** Cheap checks that must pass before the password is hashed. */
  precheck?: () => Promise<void>;
  /** One statement: without a key it runs in autocommit on the pool. */
  create(db: Queryable, passwordHash: string | undefined): Promise<CreatedResource>;
}

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

/** Without a key, `create` runs outside any transaction: no BEGIN/COMMIT round trips on the common path. */
export async function createOnce(
  request: FastifyRequest,
  reply: FastifyReply,
  creation: Creation,
): Promise<FastifyReply> {
  const db = request.server.db;
  const respond = async (db: Queryable, passwordHash: string | undefined) => {
    const created = await creation.create(db, passwordHash);
    const headers = {
      location: linkTo(request, `/${created.id}`),
      etag: created.etag,
      'content-type': JSON_MEDIA_TYPE,
    };
    // Serialized by the route's 201 schema now, so a replay sends these exact bytes.
    const body = reply.serializeInput(created.body as Record<string, unknown>, '201') as string;
    return { id: created.id, response: { status: 201, headers, body } satisfies StoredResponse };
  };
  const prepare = async () => {
    await creation.precheck?.();
    return creation.password === undefined ? undefined : hashPassword(creation.password);
  };

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
    // Stored since the first look by an identical request racing this one, else ours until the commit.
    const now = await keys.peek(scope, key);
    if (now.record) return { stored: now.record };
    if (now.inUse) throw inUse();
    const { id, response: fresh } = await respond(tx, passwordHash);
    await keys.save({
      scope,
      key,
      requestHash,
      resource: `${creation.kind}:${id}`,
      secretHash: passwordHash ?? null,
      ...fresh,
    });
    return { fresh };
  });
  if (outcome.stored) return send(reply, await replay(outcome.stored, requestHash, creation), true);
  return send(reply, outcome.fresh, false);
}
