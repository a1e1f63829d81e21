/**
 * Rate limiting (docs/api.md §7), counted by @fastify/rate-limit: in Redis when
 * REDIS_URL is set, so every instance shares one budget per client, else in
 * this process's memory.
 *
 * Clients: `user:<id>` when the request carries a valid token, else
 * `ip:<address>` (request.ip, so TRUST_PROXY decides whether forwarded headers
 * count; IPv6 clients are grouped by /64 as the plugin does by default). A bad
 * token is counted against the IP, so it can neither probe nor drain another
 * user's budget, and the auth hook still answers 401 afterwards.
 *
 * A client over its budget costs no database lookup of its token, whatever it
 * sends. The user a token belongs to is remembered from earlier requests of
 * this process whose token the auth hook accepted (a bounded map keyed by the
 * token's SHA-256 from request.credential(), never the secret itself), so a known
 * token is counted against its user without a lookup; a token that stops
 * being accepted (revoked, expired) is forgotten at its first 401. A token not
 * known yet is looked up to find its user (the same single lookup the auth
 * hook then reuses), unless its IP is over its budget already: then it counts
 * against the IP unlooked, so guessing tokens from a limited address is free
 * for the server. (A genuine user new to this instance behind such an address
 * waits for that address's window to end.) The map only chooses a budget:
 * every request's token is still checked by the auth hook.

 * Budgets: every route spends the "default" policy (RATE_LIMIT_MAX per
 * RATE_LIMIT_WINDOW). Routes with `config: { authRateLimit: true }` (log-in and
 * sign-up) spend only the stricter "auth" policy (RATE_LIMIT_AUTH_MAX, same
 * window, one budget shared by those routes), so password guessing cannot eat
 * the general budget nor the other way round; their headers describe "auth".
 * Routes with `config: { rateLimit: false }` (health, and the docs page with its
 * assets; not /openapi.json, plugins/openapi.ts) are neither counted nor given headers.
 *
 * Headers, on every other response including 401, 404 and 429, describing the
 * policy the request spent:
 *   RateLimit-Limit: 300            RateLimit-Remaining: 299     RateLimit-Reset: 42
 *     (draft-ietf-httpapi-ratelimit-headers-06 and earlier; what docs/api.md §7 names)
 *   RateLimit-Policy: "default";q=300;w=60     RateLimit: "default";r=299;t=42
 *     (the structured fields of draft-ietf-httpapi-ratelimit-headers-11, §3 and §4)
 * Reset and t are the seconds until the client's fixed window ends. A 429 adds
 * Retry-After with that same number and is rendered by the central error handler.
 *
 * The check is an app-wide onRequest hook added before auth's, so it also covers
 * unknown routes and the contract's order holds: 429 before 401, 400/413/415, 422, 404...
 *
 * Redis failures fail open: requests are served unlimited (the headers then show
 * a full, fresh budget), a warning is logged at most every 30 s, and limiting
 * resumes by itself once the client reconnects. Every Redis call is bounded
 * (connect 1 s, command 200 ms, no offline queue), so a slow or dead Redis costs
 * a request at most ~200 ms and never stalls it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import rateLimit, { normalizeIP } from '@fastify/rate-limit';
import { Redis } from 'ioredis';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { HttpError } from '../errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Spend the stricter RATE_LIMIT_AUTH_MAX budget instead of the default one. */
    authRateLimit?: boolean;
  }
}

export interface RateLimitPluginOptions {
  rateLimit: Config['rateLimit'];
  redisUrl: Config['redisUrl'];
  /** Counters are kept per database: instances serving one database share them. */
  databaseUrl: string;
}

interface Policy {
  name: 'default' | 'auth';
  max: number;
}

const REDIS_WARNING_INTERVAL_MS = 30_000;
/** Entries of each of the maps below (~100 bytes each). */
const MAX_REMEMBERED = 10_000;
const STARTUP_WAIT_MS = 1_000;

function createRedis(url: string) {
  return new Redis(url, {
    // Connected explicitly below, so start-up can wait for it (briefly).
    lazyConnect: true,
    connectTimeout: 1_000,
    commandTimeout: 200,
    // Without Redis a command fails at once instead of queueing behind a reconnect.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    // Keep trying, at least once a second, so limiting resumes soon after an outage.
    retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
  });
}

/**
 * Redis keys look like `posts-api:rate-limit:<database>:default:user:42`. The
 * database name separates deployments (and test runs) sharing one Redis.
 */
function redisNamespace(databaseUrl: string): string {
  const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1)) || 'default';
  return `posts-api:rate-limit:${database}:`;
}

export default fp<RateLimitPluginOptions>(
  async (app, { rateLimit: limits, redisUrl, databaseUrl }) => {
    const windowSeconds = limits.windowSeconds;
    const policies = {
      default: { name: 'default', max: limits.max },
      auth: { name: 'auth', max: limits.authMax },
    } as const satisfies Record<string, Policy>;
    const policyOf = (request: FastifyRequest): Policy =>
      request.routeOptions.config.authRateLimit ? policies.auth : policies.default;

    let lastWarning = -Infinity;
    let degraded = false;
    const redisUnavailable = (error: unknown) => {
      degraded = true;
      const now = Date.now();
      if (now - lastWarning < REDIS_WARNING_INTERVAL_MS) return;
      lastWarning = now;
      app.log.warn({ err: error }, 'Redis unavailable: requests are served without rate limiting until it is back');
    };

    const redis = redisUrl === undefined ? undefined : createRedis(redisUrl);
    if (redis) {
      redis.on('error', redisUnavailable);
      app.addHook('onClose', async () => {
        await redis.quit().catch(() => redis.disconnect());
      });
      // Start-up waits a moment so the first requests are counted, but a Redis
      // that is down (or accepts and never answers) must not keep the API down:
      // the client goes on reconnecting in the background.
      const connecting = redis.connect().catch(redisUnavailable);
      await Promise.race([connecting, sleep(STARTUP_WAIT_MS, undefined, { ref: false })]);
    }

    const ipKey = (request: FastifyRequest) => `ip:${normalizeIP(request.ip)}`;
    /** Bounded: when full, the oldest entry goes (a Map keeps insertion order). */
    const remember = <V>(map: Map<string, V>, key: string, value: V) => {
      if (!map.has(key) && map.size >= MAX_REMEMBERED) map.delete(map.keys().next().value!);
      map.set(key, value);
    };
    /** Token digest → its user's id. */
    const tokenOwners = new Map<string, number>();
    /** Counter key (`<policy>:ip:<address>`) → until when (epoch ms) it is over its budget. */
    const limitedIps = new Map<string, number>();
    /** The counter key of each request that sent a token. */
    const keyOf = new WeakMap<FastifyRequest, string>();

    const tokenKey = (request: FastifyRequest): string | Promise<string> => {
      const policy = policyOf(request).name;
      const credential = request.credential();
      const owner = credential === null ? undefined : tokenOwners.get(credential);
      if (owner !== undefined) return `${policy}:user:${owner}`;
      const ip = `${policy}:${ipKey(request)}`;
      if ((limitedIps.get(ip) ?? 0) > Date.now()) return ip;
      // A bad token: counted against the IP; the auth hook answers 401 next.
      return request.authenticate().then((user) => (user ? `${policy}:user:${user.id}` : ip), () => ip);
    };
    // After auth has judged the token (any response, errors included).
    app.addHook('onResponse', (request, reply, done) => {
      const credential = request.headers.authorization === undefined ? null : request.credential();
      if (credential !== null) {
        if (request.user) {
          if (!tokenOwners.has(credential)) remember(tokenOwners, credential, request.user.id);
        } else if (reply.statusCode === 401) {
          tokenOwners.delete(credential);
        }
      }
      done();
    });

    await app.register(rateLimit, {
      // No per-route hooks: ours below is global, so it also covers 404/405
      // (the not-found handler) and runs before auth.
      global: false,
      max: (request) => policyOf(request).max,
      timeWindow: windowSeconds * 1_000,
      keyGenerator: (request) => {
        const header = request.headers.authorization;
        // Anonymous requests (most reads) need no lookup, nor a promise.
        if (header === undefined) return `${policyOf(request).name}:${ipKey(request)}`;
        const key = tokenKey(request);
        if (typeof key === 'string') {
          keyOf.set(request, key);
          return key;
        }
        return key.then((k) => {
          keyOf.set(request, k);
          return k;
        });
      },
      // Store errors reach the hook below, which fails open and logs them.
      skipOnError: false,
      ...(redis ? { redis, nameSpace: redisNamespace(databaseUrl) } : {}),
    });
    const count = app.createRateLimit();

    const sendHeaders = (reply: FastifyReply, policy: Policy, remaining: number, resetSeconds: number) => {
      reply.headers({
        'ratelimit-limit': policy.max,
        'ratelimit-remaining': remaining,
        'ratelimit-reset': resetSeconds,
        'ratelimit-policy': `"${policy.name}";q=${policy.max};w=${windowSeconds}`,
        ratelimit: `"${policy.name}";r=${remaining};t=${resetSeconds}`,
      });
    };

    app.addHook('onRequest', async (request, reply) => {
      if (request.routeOptions.config.rateLimit === false) return;
      const policy = policyOf(request);

      let state;
      try {
        state = await count(request);
      } catch (error) {
        redisUnavailable(error);
        sendHeaders(reply, policy, policy.max, windowSeconds);
        return;
      }
      if (state.isAllowed) return; // no allow-list is configured; narrows the type
      if (degraded) {
        degraded = false;
        app.log.info('Redis answers again: rate limiting resumed');
      }

      sendHeaders(reply, policy, state.remaining, state.ttlInSeconds);
      if (state.remaining === 0) {
        // The next request from this address is over the budget: it need not be looked up to say so.
        const key = request.headers.authorization === undefined ? `${policy.name}:${ipKey(request)}` : keyOf.get(request);
        if (key?.includes(':ip:')) remember(limitedIps, key, Date.now() + state.ttlInSeconds * 1_000);
      }
      if (state.isExceeded) {
        throw new HttpError(
          429,
          `too many requests: ${policy.max} per ${windowSeconds} s allowed; try again in ${state.ttlInSeconds} s`,
          undefined,
          { 'retry-after': String(state.ttlInSeconds) },
        );
      }
    });
  },
  { name: 'rate-limit', dependencies: ['errors'] },
);
