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
  input: Record<string, string | number | boolean | null | undefined>;
  password?: string;
  /** Cheap checks that must pass before the password is hashed. */
  precheck?: () => Promise<void>;
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

/** Whether the request sends the password the first one did: only its hash was kept. */
async function samePassword(record: IdempotencyRecord, password: string | undefined): Promise<boolean> {
  if (record.secretHash === null) return password === undefined;
  if (password === undefined) return false;
  return verifyPassword(password, record.secretHash);
}

/** The first response again, if this is the same request. */
async function replay(record: IdempotencyRecord, requestHash: Buffer, creation: Creation): Promise<StoredResponse> {
  const passwordMatches = await samePassword(record, creation.password);
  if (!record.requestHash.equals(requestHash) || !passwordMatches) {
    throw validation({ [FIELD]: ['was already used for a different request'] });
  }
  if (record.body === null) {
    const [kind, id] = (record.resource ?? ':').split(':');
    throw conflict(`${kind} ${id}, created by the first request with this Idempotency-Key, has since been deleted`, {
      [FIELD]: [`was used to create ${kind} ${id}, which has since been deleted`],
    });
  }
  return { status: record.status, headers: { ...record.headers, 'idempotent-replayed': 'true' }, body: record.body };
}

/** Without a key, `create` runs outside any transaction: no BEGIN/COMMIT round trips on the common path. */
export async function createOnce(
  request: FastifyRequest,
  reply: FastifyReply,
  creation: Creation,
): Promise<FastifyReply> {
  const db = request.server.db;
  const send = ({ status, headers, body }: StoredResponse) => reply.code(status).headers(headers).send(body);
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
    const passwordHash = await prepare();
    return send((await retryingConflicts(() => respond(db, passwordHash))).response);
  }

  const scope = request.user ? `user:${request.user.id}` : 'anonymous';
  const requestHash = fingerprint(request, creation.input);
  // The live record of the key, else the key's lock: in a transaction, held to its end.
  const look = async (db: Queryable) => {
    const { record, inUse: busy } = await idempotencyKeysRepository(db).peek(scope, key);
    if (busy) throw inUse();
    return record;
  };
  const earlier = await look(db);
  if (earlier) return send(await replay(earlier, requestHash, creation));

  const passwordHash = await prepare();
  const outcome = await withTransaction(db, async (tx) => {
    // Stored since the first look by an identical request racing this one.
    const stored = await look(tx);
    if (stored) return { stored };
    const { id, response: fresh } = await respond(tx, passwordHash);
    const resource = `${creation.kind}:${id}`;
    const secretHash = passwordHash ?? null;
    await idempotencyKeysRepository(tx).save({ scope, key, requestHash, resource, secretHash, ...fresh });
    return { fresh };
  });
  return send(outcome.stored ? await replay(outcome.stored, requestHash, creation) : outcome.fresh);
}
