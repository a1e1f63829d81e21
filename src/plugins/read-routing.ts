/**
 * Sets `request.replica` for the public reads. A request with a token reads the primary, so whoever writes reads
 * their own writes; an anonymous reader may read a replica within the lag bound, as the edge cache may answer late.
 * Offset list pages read the primary (routes/resource-routes.ts).
 */
import fp from 'fastify-plugin';
import type { Queryable } from '../db/pool.js';
import { perDatabase } from '../db/per-database.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** null: the primary. */
    replica: Queryable | null;
  }
}

/** A repository on the request's replica, else on `primary`; one per database handle. */
export function readRepository<R>(
  make: (db: Queryable) => R,
  primary: Queryable,
): (request: { replica: Queryable | null }) => R {
  const on = perDatabase(make);
  return (request: { replica: Queryable | null }) => on(request.replica ?? primary);
}

export default fp(
  async (app) => {
    app.decorateRequest('replica', null);
    const router = app.replicas;
    if (router === null) return;

    app.addHook('onRequest', (request, _reply, done) => {
      if (request.method === 'GET' && request.routeOptions.config.readsReplica && !request.headers.authorization) {
        const reader = router.reader();
        request.replica = reader === app.db ? null : reader;
      }
      done();
    });

    // A replica within the lag bound may lack what was just created: its 404 is read again on the primary.
    app.addHook('onRoute', (route) => {
      if (!route.config?.readsReplica) return;
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
  },
  // After auth: a request its hooks refuse (429, 401) takes no replica; only one that gets through is routed.
  { name: 'read-routing', dependencies: ['db', 'auth'] },
);
