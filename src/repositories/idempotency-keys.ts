/** All SQL about idempotency keys. A key is in flight while a transaction holds its advisory lock. */
import { createHash } from 'node:crypto';
import type { Queryable } from '../db/pool.js';
import { firstRow, written } from '../db/sql.js';

/** How long a stored response is replayed; older rows are ignored, then purged. */
export const IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60;

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface IdempotencyRecord extends Omit<StoredResponse, 'body'> {
  scope: string;
  key: string;
  requestHash: Buffer;
  resource: string | null;
  secretHash: string | null;
  /** null once the resource has been deleted (a trigger drops the copy). */
  body: string | null;
}

const RECORD = `scope, key, request_hash AS "requestHash", status, headers, body, resource, secret_hash AS "secretHash"`;

/** 64 bits of a SHA-256: a collision only makes one of two unrelated requests a 409 while the other runs. */
export function idempotencyLockId(scope: string, key: string): string {
  return createHash('sha256').update(`idempotency\0${scope}\0${key}`).digest().readBigInt64BE(0).toString();
}

export interface IdempotencyKeysRepository {
  /** The live record of a key, else whether another transaction holds it; a free lock is taken (to the transaction's end). */
  peek(scope: string, key: string): Promise<{ record?: IdempotencyRecord; inUse: boolean }>;
  /** Under the key's lock the only row that can exist is an expired one, which is replaced. */
  save(record: IdempotencyRecord): Promise<void>;
  /** SKIP LOCKED: several instances purge at once without waiting on each other. */
  purgeExpired(batch: number): Promise<number>;
}

export function idempotencyKeysRepository(db: Queryable): IdempotencyKeysRepository {
  return {
    async peek(scope: string, key: string): Promise<{ record?: IdempotencyRecord; inUse: boolean }> {
      const row = await firstRow<IdempotencyRecord & { free: boolean }>(
        db,
        `SELECT pg_try_advisory_xact_lock($1::bigint) AS free, r.* FROM (SELECT 1) one LEFT JOIN LATERAL (
             SELECT ${RECORD} FROM idempotency_keys
             WHERE scope = $2 AND key = $3 AND created_at > now() - make_interval(secs => $4)) r ON TRUE`,
        [idempotencyLockId(scope, key), scope, key, IDEMPOTENCY_TTL_SECONDS],
      );
      const { free, ...record } = row!;
      return record.scope === null ? { inUse: !free } : { record, inUse: false };
    },

    async save({ scope, key, requestHash, status, headers, body, resource, secretHash }: IdempotencyRecord) {
      await written(
        db,
        `INSERT INTO idempotency_keys (scope, key, request_hash, status, headers, body, resource, secret_hash)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (scope, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = EXCLUDED.status,
             headers = EXCLUDED.headers, body = EXCLUDED.body, resource = EXCLUDED.resource,
             secret_hash = EXCLUDED.secret_hash, created_at = EXCLUDED.created_at`,
        [scope, key, requestHash, status, JSON.stringify(headers), body, resource, secretHash],
      );
    },

    purgeExpired: (batch: number) =>
      written(
        db,
        `DELETE FROM idempotency_keys WHERE (scope, key) IN (
             SELECT scope, key FROM idempotency_keys WHERE created_at <= now() - make_interval(secs => $1)
             LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        [IDEMPOTENCY_TTL_SECONDS, batch],
      ),
  };
}
