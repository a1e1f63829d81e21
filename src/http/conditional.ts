/**
 * Conditional requests (docs/api.md §8, RFC 9110 §8.8.3 and §13.1): the one place
 * that knows what a resource's ETag is and how If-None-Match and If-Match
 * compare with it.
 *
 * ETags are strong and change whenever the representation does:
 * - post: id, version (bumped by every real PATCH/PUT) and commentCount, which
 *   comment writes change through a trigger without bumping the version;
 * - comment: id and version;
 * - user: a digest of the representation as this viewer gets it, so the view
 *   with e-mail (the user themself, admins) and the public one never share a
 *   tag, and a public tag moves only when public fields do (a password or
 *   e-mail change is not betrayed by it).
 * - any other 200 GET, lists above all: a digest of the body as sent
 *   (src/plugins/http-caching.ts), so it changes when an item or a total does.
 * Nothing in a tag is secret: ids, edit counts and counts are public, and a
 * digest reveals nothing about its input.
 */
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { preconditionFailed } from '../errors.js';

export const postEtag = (post: { id: number; version: number; commentCount: number }) =>
  `"p${post.id}-${post.version}-${post.commentCount}"`;

export const commentEtag = (comment: { id: number; version: number }) => `"c${comment.id}-${comment.version}"`;

/** `email` is absent from the public view, which is what makes the two views' tags differ. */
export function userEtag(user: { id: number; name: string; role: string; email?: string; createdAt: string }): string {
  const digest = createHash('sha256')
    .update(JSON.stringify([user.id, user.name, user.role, user.email ?? null, user.createdAt]))
    .digest('base64url')
    .slice(0, 22);
  return `"u${user.id}-${digest}"`;
}

/** A digest of a serialized answer: strong, since equal bytes are the same representation. */
export function bodyEtag(payload: string): string {
  return `"b${createHash('sha256').update(payload).digest('base64url').slice(0, 22)}"`;
}

const ENTITY_TAG = /(W\/)?("[^"]*")/g;

/**
 * Whether an If-Match / If-None-Match value names this ETag: `*` names any
 * current representation; weak comparison ignores W/, strong comparison never
 * matches a weak one. A malformed value names nothing.
 */
function matches(header: string, etag: string, comparison: 'weak' | 'strong'): boolean {
  if (header.trim() === '*') return true;
  for (const [, weak, opaque] of header.matchAll(ENTITY_TAG)) {
    if (opaque === etag && (comparison === 'weak' || weak === undefined)) return true;
  }
  return false;
}

/** Whether an If-None-Match value names this ETag (weak comparison). */
export const namesEtag = (header: string, etag: string) => matches(header, etag, 'weak');

/**
 * GET and HEAD of one resource: sends its ETag, and a 304 with no body when
 * If-None-Match names it.
 */
export function conditionalGet<T>(
  request: FastifyRequest,
  reply: FastifyReply,
  etag: string,
  body: T,
): T | FastifyReply {
  reply.header('etag', etag);
  const header = request.headers['if-none-match'];
  if (header !== undefined && namesEtag(header, etag)) return reply.code(304).send();
  return body;
}

/**
 * PATCH, PUT and DELETE: call inside the write's transaction, on the row-locked
 * resource, after the 404 and 403 checks, so of several clients writing with
 * the same ETag exactly one succeeds and the rest get 412.
 */
export function requireMatch(request: FastifyRequest, etag: string): void {
  const header = request.headers['if-match'];
  if (header !== undefined && !matches(header, etag, 'strong')) throw preconditionFailed();
}

/** A changed resource's 200: the body with its new ETag. */
export function withEtag<T>(reply: FastifyReply, etag: string, body: T): T {
  reply.header('etag', etag);
  return body;
}

/** Cache-Control of an answer holding a user's private data (set as a route's `config.cacheControl`). */
export const PRIVATE = 'private, no-store';
