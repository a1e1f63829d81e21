/** Rate limiting (docs/architecture.md, "Authentication and rate limiting"). */
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import rateLimit, { normalizeIP } from '@fastify/rate-limit';
import { Redis } from 'ioredis';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

// The database name separates deployments (and test runs) sharing one Redis.
function redisNamespace(databaseUrl: string): string {
  const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1)) || 'default';
  return `posts-api:rate-limit:${database}:`;
}

/** Redis errors serve requests unlimited, with a warning at most every REDIS_WARNING_INTERVAL_MS. */
function failingOpen(app: FastifyInstance) {
  let lastWarning = -Infinity;
  let degraded = false;
  return {
    unavailable(error: unknown) {
      degraded = true;
      const now = Date.now();
      if (now - lastWarning < REDIS_WARNING_INTERVAL_MS) return;
      lastWarning = now;
      app.log.warn({ err: error }, 'Redis unavailable: requests are served without rate limiting until it is back');
    },
    answered() {
      if (!degraded) return;
      degraded = false;
      app.log.info('Redis answers again: rate limiting resumed');
    },
  };
}

async function connectRedis(app: FastifyInstance, url: string, unavailable: (error: unknown) => void): Promise<Redis> {
  const redis = createRedis(url);
  redis.on('error', unavailable);
  app.addHook('onClose', async () => {
    await redis.quit().catch(() => redis.disconnect());
  });
  // Start-up waits a moment so the first requests are counted, but a Redis that is down
  // (or accepts and never answers) must not keep the API down: the client goes on reconnecting.
  const connecting = redis.connect().catch(unavailable);
  await Promise.race([connecting, sleep(STARTUP_WAIT_MS, undefined, { ref: false })]);
  return redis;
}

/** Bounded: when full, the oldest entry goes (a Map keeps insertion order). */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  if (!map.has(key) && map.size >= MAX_REMEMBERED) map.delete(map.keys().next().value!);
  map.set(key, value);
}

/** An address already over its budget is not looked up. */
function clientKeys(app: FastifyInstance, policyOf: (request: FastifyRequest) => Policy) {
  const ipKey = (request: FastifyRequest) => `ip:${normalizeIP(request.ip)}`;
  const tokenOwners = new Map<string, number>();
  const limitedIps = new Map<string, number>();
  const keyOf = new WeakMap<FastifyRequest, string>();

  const tokenKey = (request: FastifyRequest): string | Promise<string> => {
    const policy = policyOf(request).name;
    const credential = request.credential();
    const owner = credential === null ? undefined : tokenOwners.get(credential);
    if (owner !== undefined) return `${policy}:user:${owner}`;
    const ip = `${policy}:${ipKey(request)}`;
    if ((limitedIps.get(ip) ?? 0) > Date.now()) return ip;
    // A bad token: counted against the IP; the auth hook answers 401 next.
    return request.authenticate().then(
      (user) => (user ? `${policy}:user:${user.id}` : ip),
      () => ip,
    );
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

  const keyGenerator = (request: FastifyRequest): string | Promise<string> => {
    // Anonymous requests (most reads) need no lookup, nor a promise.
    if (request.headers.authorization === undefined) return `${policyOf(request).name}:${ipKey(request)}`;
    const key = tokenKey(request);
    if (typeof key === 'string') {
      keyOf.set(request, key);
      return key;
    }
    return key.then((k) => {
      keyOf.set(request, k);
      return k;
    });
  };
  const limited = (key: string, until: number) => remember(limitedIps, key, until);
  return { ipKey, keyGenerator, keyOf, limited };
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

    const failOpen = failingOpen(app);
    const redis = redisUrl === undefined ? undefined : await connectRedis(app, redisUrl, failOpen.unavailable);
    const { ipKey, keyGenerator, keyOf, limited } = clientKeys(app, policyOf);
    await app.register(rateLimit, {
      // No per-route hooks: ours below is global, so it also covers 404/405
      // (the not-found handler) and runs before auth.
      global: false,
      max: (request) => policyOf(request).max,
      timeWindow: windowSeconds * 1_000,
      keyGenerator,
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
        failOpen.unavailable(error);
        sendHeaders(reply, policy, policy.max, windowSeconds);
        return;
      }
      if (state.isAllowed) return; // no allow-list is configured; narrows the type
      failOpen.answered();

      sendHeaders(reply, policy, state.remaining, state.ttlInSeconds);
      if (state.remaining === 0) {
        // The next request from this address is over the budget: it need not be looked up to say so.
        const key =
          request.headers.authorization === undefined ? `${policy.name}:${ipKey(request)}` : keyOf.get(request);
        if (key?.includes(':ip:')) limited(key, Date.now() + state.ttlInSeconds * 1_000);
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
