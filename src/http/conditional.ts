/** ETags, If-None-Match, If-Match (docs/api.md §8); each resource's own ETag is in its declaration. */
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { preconditionFailed } from '../errors.js';

/** 132 bits of SHA-256, enough to tell two representations apart. */
export const digest = (text: string): string => createHash('sha256').update(text).digest('base64url').slice(0, 22);

export const bodyEtag = (payload: string): string => `"b${digest(payload)}"`;

const ENTITY_TAG = /(W\/)?("[^"]*")/g;

function matches(header: string, etag: string, comparison: 'weak' | 'strong'): boolean {
  if (header.trim() === '*') return true;
  for (const [, weak, opaque] of header.matchAll(ENTITY_TAG)) {
    if (opaque === etag && (comparison === 'weak' || weak === undefined)) return true;
  }
  return false;
}

export const namesEtag = (header: string, etag: string): boolean => matches(header, etag, 'weak');

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

/** Call inside the write's transaction on the locked row, so one of several same-ETag writers wins. */
export function requireMatch(request: FastifyRequest, etag: string): void {
  const header = request.headers['if-match'];
  if (header !== undefined && !matches(header, etag, 'strong')) throw preconditionFailed();
}

export function withEtag<T>(reply: FastifyReply, etag: string, body: T): T {
  reply.header('etag', etag);
  return body;
}
