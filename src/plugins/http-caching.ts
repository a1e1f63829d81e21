/**
 * Cache-Control on every answer and a body-digest ETag on 200 GETs that have none of their own (docs/api.md §11):
 * a shared cache may keep an anonymous public read briefly, an answer to a request with credentials never.
 */
import fp from 'fastify-plugin';
import type { AppConfig } from '../config.js';
import type { FastifyReply } from 'fastify';
import { bodyEtag, namesEtag } from '../http/conditional.js';
import { NO_STORE, PRIVATE } from '../http/route-options.js';

/** For an answer that shows this viewer's own data (their e-mail) to them. */
export function keepPrivate(reply: FastifyReply): void {
  reply.header('cache-control', PRIVATE);
}

export default fp<{ config: AppConfig }>(
  async (app, { config: { sharedCacheSeconds } }) => {
    const anonymous = sharedCacheSeconds > 0 ? `public, max-age=0, s-maxage=${sharedCacheSeconds}` : 'no-cache';
    app.addHook('onSend', (request, reply, payload, done) => {
      const read = request.method === 'GET' || request.method === 'HEAD';
      const status = reply.statusCode;
      if (!reply.hasHeader('cache-control')) {
        const explicit = request.routeOptions.config.cacheControl;
        if (explicit !== undefined) reply.header('cache-control', explicit);
        else if (read && (status === 200 || status === 304)) {
          reply.header('cache-control', request.headers.authorization === undefined ? anonymous : 'no-cache');
          // The answer depends on the credentials: a shared cache keeps the anonymous one apart.
          const vary = reply.getHeader('vary');
          reply.header('vary', vary ? `${String(vary)}, Authorization` : 'Authorization');
        } else reply.header('cache-control', NO_STORE);
      }
      // Nothing stores a no-store answer (health), so a validator would never be sent back.
      if (
        read &&
        status === 200 &&
        typeof payload === 'string' &&
        !reply.hasHeader('etag') &&
        reply.getHeader('cache-control') !== NO_STORE
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
