/**
 * Sets `request.replica` for the `cached` routes. Read-your-writes and cache
 * freshness ride on the change bus (docs/architecture.md, "Read replicas").
 */
import { performance } from 'node:perf_hooks';
import fp from 'fastify-plugin';
import type { FastifyRequest } from 'fastify';
import type { Queryable } from '../db/pool.js';
import { HEARTBEAT_MS } from '../cache/change-bus.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** null: the primary. */
    replica: Queryable | null;
  }
}

export function oncePerDatabase<R>(make: (db: Queryable) => R): (db: Queryable) => R {
  const made = new WeakMap<Queryable, R>();
  return (db) => {
    let r = made.get(db);
    if (r === undefined) made.set(db, (r = make(db)));
    return r;
  };
}

export function readRepository<R>(
  make: (db: Queryable) => R,
  primary: Queryable,
): (request: { replica: Queryable | null }) => R {
  const on = oncePerDatabase(make);
  return (request) => on(request.replica ?? primary);
}

export default fp(
  async (app) => {
    app.decorateRequest('replica', null);
    const router = app.replicas;
    if (router === null) return;
    const bus = app.changeBus;

    let evictedUpTo = 0;
    /** performance.now() of the latest eviction of unknown position, until a later position is sampled. */
    let unknownSince: number | null = null;
    const written = new Map<number, { position: number; at: number }>();
    bus.subscribe({
      evicted(_labels, position) {
        if (position === undefined) unknownSince = performance.now();
        else evictedUpTo = Math.max(evictedUpTo, position);
      },
      reached(position) {
        evictedUpTo = Math.max(evictedUpTo, position);
      },
      wrote(writers, position) {
        const at = performance.now();
        for (const writer of writers) {
          const id = Number(writer);
          written.set(id, { position: Math.max(position, written.get(id)?.position ?? 0), at });
        }
      },
    });
    // Past twice the lag bound any replica within the bound has the write.
    const forget = setInterval(() => {
      const oldest = performance.now() - 2 * router.maxLagMs;
      for (const [id, write] of written) if (write.at < oldest) written.delete(id);
    }, HEARTBEAT_MS);
    forget.unref();
    app.addHook('onClose', async () => clearInterval(forget));

    function replicaFor(request: FastifyRequest, storable: boolean): Queryable | null {
      if (!bus.healthy()) return null;
      let atLeast = request.user ? (written.get(request.user.id)?.position ?? 0) : 0;
      if (storable) {
        if (unknownSince !== null) {
          const position = router!.positionAfter(unknownSince);
          if (position === undefined) return null;
          evictedUpTo = Math.max(evictedUpTo, position);
          unknownSince = null;
        }
        atLeast = Math.max(atLeast, evictedUpTo);
      }
      const reader = router!.reader(atLeast);
      return reader === app.db ? null : reader;
    }

    // After the response cache's hook: a hit never gets here, and a miss it will store says so (cacheEpoch).
    app.addHook('onRequest', (request, _reply, done) => {
      if (request.method === 'GET' && request.routeOptions.config.cached)
        request.replica = replicaFor(request, request.cacheEpoch !== null);
      done();
    });

    // A replica within the lag bound may lack what was just created: its 404 is read again on the primary.
    app.addHook('onRoute', (route) => {
      if (!route.config?.cached) return;
      const handler = route.handler;
      route.handler = async function (this: typeof app, request, reply) {
        try {
          return await handler.call(this, request, reply);
        } catch (error) {
          if (request.replica === null || (error as { statusCode?: unknown }).statusCode !== 404) throw error;
          request.replica = null;
          return handler.call(this, request, reply);
        }
      };
    });

    await bus.listen();
  },
  { name: 'read-routing', dependencies: ['db', 'auth', 'changes', 'response-cache'] },
);
