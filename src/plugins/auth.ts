/**
 * Bearer tokens, checked on every request that sends one (a bad token is a 401 anywhere). A checked token is
 * trusted for a second (authCacheMs): another instance may accept a revoked one that long. `authenticate()` is memoized
 * for the rate limiter.
 */
import fp from 'fastify-plugin';
import { LRUCache } from 'lru-cache';
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { invalidToken, unauthorized } from '../errors.js';
import { hashToken, isWellFormedToken } from '../security.js';
import { tokensRepository, type AuthUser } from '../repositories/tokens.js';

declare module 'fastify' {
  interface FastifyRequest {
    user: AuthUser | null;
    authenticate(): Promise<AuthUser | null>;
  }
  interface FastifyInstance {
    requireUser: onRequestAsyncHookHandler;
    /** Call after revoking them commits. */
    forgetTokens(which: (user: AuthUser) => boolean): void;
  }
}

const AUTH_CACHE_ENTRIES = 10_000;

const BEARER = /^Bearer +([A-Za-z0-9._~+/-]{1,512}=*) *$/i;
const memo = new WeakMap<FastifyRequest, Promise<AuthUser | null>>();

function credentialOf(request: FastifyRequest): { hash: Buffer; key: string } | null {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1];
  // A token we could never have issued names no one: no hash, no lookup.
  const hash = token !== undefined && isWellFormedToken(token) ? hashToken(token) : undefined;
  return hash ? { hash, key: hash.toString('base64') } : null;
}

export default fp<{ cacheMs: number }>(
  async (app, { cacheMs }) => {
    const tokens = tokensRepository(app.db);
    // Keyed by the token's SHA-256, like the table: the secret itself is not kept.
    const trusted = cacheMs > 0 ? new LRUCache<string, AuthUser>({ max: AUTH_CACHE_ENTRIES, ttl: cacheMs }) : undefined;

    async function resolve(request: FastifyRequest): Promise<AuthUser | null> {
      const header = request.headers.authorization;
      if (header === undefined) return null;
      if (!BEARER.test(header)) throw invalidToken('the Authorization header must be "Bearer <token>"');
      const credential = credentialOf(request);
      if (!credential) throw invalidToken();
      const { hash, key } = credential;
      const known = trusted?.get(key);
      if (known) return known;
      const found = await tokens.authenticate(hash);
      if (!found) throw invalidToken();
      const { expiresAtMs, ...user } = found;
      trusted?.set(key, user, { ttl: Math.max(1, Math.min(cacheMs, Math.floor(expiresAtMs - Date.now()))) });
      return user;
    }

    app.decorate('forgetTokens', (which: (user: AuthUser) => boolean) => {
      if (!trusted) return;
      for (const [key, user] of trusted.entries()) if (which(user)) trusted.delete(key);
    });

    app.decorateRequest('user', null);
    app.decorateRequest('authenticate', function (this: FastifyRequest) {
      if (memo.has(this)) return memo.get(this)!;
      const pending = resolve(this);
      pending.catch(() => undefined); // rejections are observed by whoever awaits
      memo.set(this, pending);
      return pending;
    });

    // Callback-style, so the anonymous majority of reads costs no promise here.
    app.addHook('onRequest', (request, _reply, done) => {
      if (request.headers.authorization === undefined) return done();
      request.authenticate().then((user) => {
        request.user = user;
        done();
      }, done);
    });

    // A 401 to a trusted token: its user was deleted behind the service's back.
    if (trusted) {
      app.addHook('onSend', (request, reply, payload, done) => {
        const user = request.user;
        if (reply.statusCode === 401 && user !== null) app.forgetTokens((cached) => cached.id === user.id);
        done(null, payload);
      });
    }

    app.decorate('requireUser', async (request: FastifyRequest) => {
      if (!request.user) throw unauthorized('this request needs an access token: POST /tokens to get one');
    });
  },
  // After the rate limiter: its onRequest hook runs first, so a 429 comes before a 401.
  { name: 'auth', dependencies: ['db', 'rate-limit'] },
);
