/** Rate limiting (docs/architecture.md, "Authentication and rate limiting"). */
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import rateLimit, { normalizeIP } from '@fastify/rate-limit';
import { Redis } from 'ioredis';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppConfig } from '../config.js';
import { HttpError } from '../errors.js';

type Policy = { name: 'default' | 'auth'; max: number };

const REDIS_WARNING_INTERVAL_MS = 30_000;

export default fp<{ config: AppConfig }>(
  async (app, { config: { rateLimit: limits, redisUrl, databaseUrl } }) => {
    const { windowSeconds } = limits;
    const defaultPolicy: Policy = { name: 'default', max: limits.max };
    const authPolicy: Policy = { name: 'auth', max: limits.authMax };
    const policyOf = (request: FastifyRequest) =>
      request.routeOptions.config.authRateLimit ? authPolicy : defaultPolicy;

    // Redis errors serve requests unlimited, with a warning at most every REDIS_WARNING_INTERVAL_MS.
    let lastWarning = -Infinity;
    let degraded = false;
    const unavailable = (error: unknown) => {
      degraded = true;
      if (Date.now() - lastWarning < REDIS_WARNING_INTERVAL_MS) return;
      lastWarning = Date.now();
      app.log.warn({ err: error }, 'Redis unavailable: requests are served without rate limiting until it is back');
    };

    let redis: Redis | undefined;
    if (redisUrl !== undefined) {
      redis = new Redis(redisUrl, {
        // Connected below, so start-up can wait for it (briefly).
        lazyConnect: true,
        connectTimeout: 1_000,
        commandTimeout: 200,
        // Without Redis a command fails at once instead of queueing behind a reconnect.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        // Keep trying, at least once a second, so limiting resumes soon after an outage.
        retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
      });
      redis.on('error', unavailable);
      const client = redis;
      app.addHook('onClose', () => client.quit().catch(() => client.disconnect()));
      // The first requests are counted, but a Redis that is down (or never answers) must not keep the API down.
      await Promise.race([redis.connect().catch(unavailable), sleep(1_000, undefined, { ref: false })]);
    }

    // The token is judged once (authenticate() is memoized, its user cached for a second by auth).
    const keyGenerator = (request: FastifyRequest): string | Promise<string> => {
      const policy = policyOf(request).name;
      const ip = `${policy}:ip:${normalizeIP(request.ip)}`;
      if (request.headers.authorization === undefined) return ip;
      // A bad token: counted against the IP; the auth hook answers 401 next.
      return request.authenticate().then(
        (user) => (user ? `${policy}:user:${user.id}` : ip),
        () => ip,
      );
    };

    await app.register(rateLimit, {
      // No per-route hooks: ours below is global, so it also covers 404/405 (the not-found handler) and runs before auth.
      global: false,
      max: (request) => policyOf(request).max,
      timeWindow: windowSeconds * 1_000,
      keyGenerator,
      // Store errors reach the hook below, which fails open and logs them.
      skipOnError: false,
      ...(redis && {
        redis,
        // The database name separates deployments (and test runs) sharing one Redis.
        nameSpace: `posts-api:rate-limit:${decodeURIComponent(new URL(databaseUrl).pathname.slice(1)) || 'default'}:`,
      }),
    });
    const count = app.createRateLimit();

    const sendHeaders = (reply: FastifyReply, policy: Policy, remaining: number, resetSeconds: number) => {
      reply.headers({
        'ratelimit-limit': policy.max,
        'ratelimit-remaining': remaining,
        'ratelimit-reset': resetSeconds,
      });
    };

    app.addHook('onRequest', async (request, reply) => {
      if (request.routeOptions.config.rateLimit === false) return;
      const policy = policyOf(request);
      let state;
      try {
        state = await count(request);
      } catch (error) {
        unavailable(error);
        sendHeaders(reply, policy, policy.max, windowSeconds);
        return;
      }
      if (state.isAllowed) return; // no allow-list is configured; narrows the type
      if (degraded) app.log.info('Redis answers again: rate limiting resumed');
      degraded = false;

      sendHeaders(reply, policy, state.remaining, state.ttlInSeconds);
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
  // After graceful-close, whose 503 comes first once closing (the store and the token lookups close with the app);
  // after http-security, so that a 429 carries the security and CORS headers (a browser could not read it without).
  { name: 'rate-limit', dependencies: ['errors', 'graceful-close', 'http-security'] },
);
