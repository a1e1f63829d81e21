/**
 * HTTP caching for clients and shared caches (docs/api.md): a Cache-Control on
 * every answer, and an ETag on every 200 GET that has none of its own (lists),
 * with If-None-Match answered 304 and no body.
 * - Public reads (GET and HEAD, 200 and 304): `no-cache`. Store, but revalidate
 *   every time: any client's write may change them at any moment.
 * - Answers holding a user's private data: `private, no-store`, set by the
 *   route (config `cacheControl`, or keepPrivate() when only some viewers see
 *   an e-mail).
 * - Everything else (the answers of writes, errors): `no-store`.
 * The list ETag is a digest of the body as sent, so its 304 saves bandwidth,
 * not work; the response cache (src/plugins/response-cache.ts) answers it from
 * memory when it holds the page.
 */
import fp from 'fastify-plugin';
import type { FastifyReply } from 'fastify';
import { PRIVATE, bodyEtag, namesEtag } from '../http/conditional.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route's Cache-Control, whatever the answer. */
    cacheControl?: string;
  }
}

/** For an answer that shows this viewer's own data (their e-mail) to them. */
export function keepPrivate(reply: FastifyReply): void {
  reply.header('cache-control', PRIVATE);
}

export default fp(
  async (app) => {
    app.addHook('onSend', (request, reply, payload, done) => {
      const read = request.method === 'GET' || request.method === 'HEAD';
      const status = reply.statusCode;
      if (!reply.hasHeader('cache-control')) {
        const policy =
          request.routeOptions.config.cacheControl ??
          (read && (status === 200 || status === 304) ? 'no-cache' : 'no-store');
        reply.header('cache-control', policy);
      }
      // Nothing stores a no-store answer (health), so a validator would never be sent back.
      if (
        read &&
        status === 200 &&
        typeof payload === 'string' &&
        !reply.hasHeader('etag') &&
        reply.getHeader('cache-control') !== 'no-store'
      ) {
        const etag = bodyEtag(payload);
        reply.header('etag', etag);
        const condition = request.headers['if-none-match'];
        if (condition !== undefined && namesEtag(condition, etag)) {
          reply.code(304).removeHeader('content-type');
          // HEAD: Fastify's own hook then drops the body, keeping its length (allowed on a 304).
          return done(null, request.method === 'HEAD' ? payload : null);
        }
      }
      done(null, payload);
    });
  },
  { name: 'http-caching' },
);
