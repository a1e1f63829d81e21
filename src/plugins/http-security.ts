/**
 * Security headers (helmet) and CORS. The API serves JSON only, so its CSP
 * forbids everything; the /docs page sets its own CSP for its static assets.
 * CORS is off unless CORS_ORIGINS lists origins (or *); browsers then see the
 * headers a client of this API needs (Link, Location, ETag, rate limits...).
 */
import fp from 'fastify-plugin';
import helmet from '@fastify/helmet';
import cors from '@fastify/cors';

export default fp<{ corsOrigins: string[] }>(
  async (app, { corsOrigins }) => {
    await app.register(helmet, {
      contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
      crossOriginResourcePolicy: { policy: corsOrigins.length ? 'cross-origin' : 'same-origin' },
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
