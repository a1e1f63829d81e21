/**
 * Security headers (helmet) and CORS. The API serves JSON only, so its CSP
 * forbids everything; the /docs page sets its own CSP for its static assets.
 * CORS is off unless CORS_ORIGINS lists origins (or *); browsers then see
 * every response header the contract names (EXPOSED_HEADERS).
 *
 * OPTIONS is only ever a CORS preflight (it carries Access-Control-Request-Method).
 * A plain OPTIONS is routed like any method a path lacks, CORS on or off: 405
 * with Allow on a known path, 404 elsewhere, with the one error body. With CORS
 * on it is answered where preflights are, before rate limiting and authentication.
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

/** Every response header of the contract a script may need to read (CORS-safelisted ones aside). */
export const EXPOSED_HEADERS = [
  'Allow',
  'ETag',
  'Idempotent-Replayed',
  'Link',
  'Location',
  'Retry-After',
  'WWW-Authenticate',
  'X-Request-Id',
  'RateLimit',
  'RateLimit-Limit',
  'RateLimit-Policy',
  'RateLimit-Remaining',
  'RateLimit-Reset',
];

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
    // Before the CORS hook, which would answer a plain OPTIONS with a text/plain 400.
    app.addHook('onRequest', (request, reply, done) => {
      if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] === undefined)
        reply.callNotFound();
      else done();
    });
    await app.register(cors, {
      origin: corsOrigins.includes('*') ? '*' : corsOrigins,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      allowedHeaders: ['Authorization', 'Content-Type', 'If-Match', 'If-None-Match', 'Idempotency-Key', 'X-Request-Id'],
      exposedHeaders: EXPOSED_HEADERS,
      maxAge: 600,
    });
  },
  { name: 'http-security' },
);
