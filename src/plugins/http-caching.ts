/**
 * Cache-Control on every answer (`no-cache` for public reads: any write may
 * change them) and a body-digest ETag on 200 GETs that have none of their own.
 */
import fp from 'fastify-plugin';
import type { FastifyReply } from 'fastify';
import { PRIVATE, bodyEtag, namesEtag } from '../http/conditional.js';

declare module 'fastify' {
  interface FastifyContextConfig {
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
