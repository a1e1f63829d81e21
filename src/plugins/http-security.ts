/**
 * Security headers (helmet) and CORS. The API serves JSON only, so its CSP
 * forbids everything; the /docs page sets its own CSP for its static assets.
 * CORS is off unless CORS_ORIGINS lists origins (or *); browsers then see the
 * headers a client of this API needs (Link, Location, ETag, rate limits...).
 *
 * helmet's headers depend only on its options, so they are computed once at
 * start-up and copied onto each reply: running its middleware per request
 * (what @fastify/helmet does) cost about as much as everything else a cached
 * read does, together.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import fp from 'fastify-plugin';
import helmet, { type HelmetOptions } from 'helmet';
import cors from '@fastify/cors';

function helmetHeaders(options: HelmetOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  const response = {
    setHeader: (name: string, value: unknown) => {
      headers[name.toLowerCase()] = String(value);
    },
    removeHeader: (name: string) => {
      delete headers[name.toLowerCase()];
    },
  };
  let done = false;
  helmet(options)({} as IncomingMessage, response as unknown as ServerResponse, (error?: unknown) => {
    if (error) throw error;
    done = true;
  });
  // Only directives that are functions of the request would make helmet asynchronous or request-dependent.
  if (!done) throw new Error('helmet did not set its headers synchronously');
  return headers;
}

export default fp<{ corsOrigins: string[] }>(
  async (app, { corsOrigins }) => {
    const headers = helmetHeaders({
      contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
      crossOriginResourcePolicy: { policy: corsOrigins.length ? 'cross-origin' : 'same-origin' },
    });
    app.addHook('onRequest', (_request, reply, done) => {
      reply.headers(headers);
      done();
    });
    if (corsOrigins.length === 0) return;
    await app.register(cors, {
      origin: corsOrigins.includes('*') ? '*' : corsOrigins,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      allowedHeaders: ['Authorization', 'Content-Type', 'If-Match', 'If-None-Match', 'Idempotency-Key', 'X-Request-Id'],
      exposedHeaders: [
        'Location', 'Link', 'ETag', 'X-Request-Id', 'Retry-After',
        'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'RateLimit-Policy', 'RateLimit',
      ],
      maxAge: 600,
    });
  },
  { name: 'http-security' },
);
