/** The one write sequence for what belongs to someone: lock, 404, 403, 412 (on the locked row), write. */
import type { FastifyRequest } from 'fastify';
import type { AuthUser } from '../repositories/tokens.js';
import { retryingConflicts, withTransaction, type Queryable } from '../db/pool.js';
import { forbidden, notFound } from '../errors.js';
import { requireMatch } from '../http/conditional.js';

export interface OwnershipRule<T> {
  missing: string;
  /** Besides admins. */
  owners(resource: T): readonly number[];
  denied: string;
}

export async function loadOwned<T>(load: Promise<T | undefined>, user: AuthUser, rule: OwnershipRule<T>): Promise<T> {
  const resource = await load;
  if (resource === undefined) throw notFound(rule.missing);
  if (user.role !== 'admin' && !rule.owners(resource).includes(user.id)) throw forbidden(rule.denied);
  return resource;
}

export interface OwnedCheck<T> {
  rule: OwnershipRule<T>;
  etag(resource: T): string;
}

/** Every check of a change (404, 403, 412) on the resource as `load` reads it. */
export async function loadForChange<T>(
  request: FastifyRequest,
  load: Promise<T | undefined>,
  check: OwnedCheck<T>,
): Promise<T> {
  const resource = await loadOwned(load, request.user!, check.rule);
  requireMatch(request, check.etag(resource));
  return resource;
}

export interface OwnedChange<T, R> extends OwnedCheck<T> {
  lock(tx: Queryable): Promise<T | undefined>;
  write(tx: Queryable, current: T): Promise<R>;
  /** Without If-Match: one statement writing a row `ownerId` (undefined: any) owns; else `read` tells 404, 403, "already so". */
  direct?: {
    write(ownerId: number | undefined): Promise<R | undefined>;
    read(): Promise<(T & R) | undefined>;
  };
}

export async function changeOwned<T, R>(request: FastifyRequest, change: OwnedChange<T, R>): Promise<R> {
  const user = request.user!;
  const { direct } = change;
  if (direct && request.headers['if-match'] === undefined) {
    const written = await retryingConflicts(() => direct.write(user.role === 'admin' ? undefined : user.id));
    if (written !== undefined) return written;
    return loadOwned<T & R>(direct.read(), user, change.rule);
  }
  return withTransaction(request.server.db, async (tx) =>
    change.write(tx, await loadForChange(request, change.lock(tx), change)),
  );
}
