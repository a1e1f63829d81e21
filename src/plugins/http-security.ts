/**
 * Security headers (helmet, computed once: per request they cost as much as a cached read) and CORS. A plain OPTIONS,
 * not a preflight, is routed like any method a path lacks: 405 or 404.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import fp from 'fastify-plugin';
import helmet, { type HelmetOptions } from 'helmet';
import cors from '@fastify/cors';

function helmetHeaders(options: HelmetOptions): Record<string, string> {
  const headers = new Map<string, string>();
  const response = {
    setHeader: (name: string, value: unknown) => headers.set(name.toLowerCase(), String(value)),
    removeHeader: (name: string) => headers.delete(name.toLowerCase()),
  };
  let done = false;
  helmet(options)({} as IncomingMessage, response as unknown as ServerResponse, (error?: unknown) => {
    if (error) throw error;
    done = true;
  });
  // Only directives that are functions of the request would make helmet asynchronous or request-dependent.
  if (!done) throw new Error('helmet did not set its headers synchronously');
  return Object.fromEntries(headers);
}

const EXPOSED_HEADERS =
  'Allow, ETag, Idempotent-Replayed, Link, Location, Retry-After, WWW-Authenticate, ' +
  'X-Request-Id, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset';

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
  { name: 'http-security', dependencies: ['errors'] },
);
