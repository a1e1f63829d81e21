/**
 * The one ownership rule for changing and deleting posts and comments: load
 * the resource (in the caller's transaction, row-locked), 404 when it does not
 * exist, then 403 unless the user is one of its owners or an admin. The order
 * follows docs/api.md §2 (404 before 403), so a missing resource is reported the
 * same way to everyone.
 */
import type { AuthUser } from '../repositories/tokens.js';
import { forbidden, notFound } from '../errors.js';

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
