/**
 * The one ownership rule and the one write sequence for changing and deleting
 * what belongs to someone (posts, comments, users). In a transaction: lock the
 * row, 404 when it does not exist, 403 unless the user is one of its owners or
 * an admin, 412 unless If-Match names its current ETag, then write. The order
 * follows docs/api.md §2 (404 before 403), so a missing resource is reported
 * the same way to everyone; the If-Match check sees the locked row, so of
 * several clients writing with the same ETag exactly one succeeds.
 */
import type { FastifyRequest } from 'fastify';
import type { AuthUser } from '../repositories/tokens.js';
import { retryingConflicts, withTransaction, type Queryable } from '../db/pool.js';
import { forbidden, notFound } from '../errors.js';
import { requireMatch } from '../http/conditional.js';

export interface OwnershipRule<T> {
  /** The 404 message. */
  missing: string;
  /** Users who may act on it besides admins (e.g. its author, the post's author). */
  owners(resource: T): readonly number[];
  /** The 403 message. */
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
  /** The resource's current ETag, which If-Match must name. */
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
  /** The resource read on the transaction, row-locked; undefined when it does not exist. */
  lock(tx: Queryable): Promise<T | undefined>;
  /** The write, on the transaction, once the locked row passed every check. */
  write(tx: Queryable, current: T): Promise<R>;
  /**
   * The same write as one statement, taken when no If-Match asks for a check:
   * no transaction, one round trip instead of four. `write` locks and changes
   * the row only if `ownerId` owns it (undefined for an admin: any row), and
   * answers undefined when it wrote nothing; then `read` tells 404 from 403 by
   * the rule, and a resource already as asked is answered as it is.
   */
  direct?: {
    write(ownerId: number | undefined): Promise<R | undefined>;
    read(): Promise<(T & R) | undefined>;
  };
}

/** Changes or deletes an owned resource by the sequence above; answers what `write` returns. */
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
