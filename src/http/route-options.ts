/**
 * What a route may declare about itself in its `config`, in one place: each option is read by one plugin, and every
 * route takes the default unless it says otherwise. Shapes in routes/resource-routes.ts set the defaults of a
 * resource's public reads (`readsReplica`).
 */
import type { FastifyContextConfig } from 'fastify';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** plugins/http-caching.ts: this route's Cache-Control (PRIVATE, NO_STORE) instead of the public-read policy. */
    cacheControl?: string;
    /** plugins/read-routing.ts: an anonymous GET of this route may read a streaming replica. */
    readsReplica?: boolean;
    /** plugins/rate-limit.ts: the stricter RATE_LIMIT_AUTH_MAX budget (sign-up, log-in) instead of the default. */
    authRateLimit?: boolean;
  }
}

/** For answers that hold a user's private data (docs/api.md §11): never stored by any cache. */
export const PRIVATE = 'private, no-store';
/** For answers that are never the same twice (health, streams). */
export const NO_STORE = 'no-store';

/** A public read: anonymous requests may go to a replica; Cache-Control is the public-read policy. */
export const PUBLIC_READ: FastifyContextConfig = { readsReplica: true };
/** Sign-up and log-in: the stricter limit, and an answer holding credentials or an e-mail. */
export const CREDENTIALS: FastifyContextConfig = { authRateLimit: true, cacheControl: PRIVATE };
/** Health checks: never rate limited, never cached. */
export const PROBE: FastifyContextConfig = { rateLimit: false, cacheControl: NO_STORE };
