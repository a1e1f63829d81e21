/**
 * Announcing committed changes to every instance (src/cache/change-bus.ts):
 * a write records what it changed with `request.changed(...)`, and once it
 * answers 2xx (or 5xx: its commit may have happened) the bus evicts it here
 * and on the other instances before the answer leaves. Rejected requests,
 * idempotent replays and empty PATCHes record nothing. Registered whether or
 * not this instance caches: the others' caches may be on.
 */
import fp from 'fastify-plugin';
import type { FastifyRequest } from 'fastify';
import { ChangeBus } from '../cache/change-bus.js';
import { changeLabels, type ChangeKind } from '../cache/labels.js';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Records that this request wrote `resource` (its representation: `id` and
     * foreign keys such as `authorId`) of `collection` (`posts`): once it has
     * answered 2xx, the cached answers showing it are evicted on every instance.
     */
    changed<R extends { id: number }>(how: ChangeKind, collection: string, resource: R): void;
    /** The cache labels of what this request changed; null while it changed nothing. */
    changes: Set<string> | null;
  }
  interface FastifyInstance {
    changeBus: ChangeBus;
  }
}

export default fp<{ connectionString: string }>(
  async (app, { connectionString }) => {
    const bus = new ChangeBus({ connectionString, pool: app.db, log: app.log });
    app.decorate('changeBus', bus);
    app.decorateRequest('changes', null);
    app.decorateRequest(
      'changed',
      function (this: FastifyRequest, how: ChangeKind, collection: string, resource: { id: number }) {
        this.changes ??= new Set();
        for (const label of changeLabels(how, collection, resource)) this.changes.add(label);
      },
    );

    app.addHook('onSend', (request, reply, payload, done) => {
      const changes = request.changes;
      const status = reply.statusCode;
      if (changes === null || (status >= 300 && status < 500)) return done(null, payload);
      void bus.announce(changes, request.user?.id).then(() => done(null, payload));
    });
    app.addHook('onClose', () => bus.close());
  },
  { name: 'changes', dependencies: ['db', 'auth'] },
);
