/**
 * Announces what a write recorded with `request.changed` before its answer leaves
 * (on 5xx too: its commit may have happened). Registered even without a cache
 * here: the other instances' may be on.
 */
import fp from 'fastify-plugin';
import type { FastifyRequest } from 'fastify';
import { ChangeBus } from '../cache/change-bus.js';
import { changeLabels, type ChangeKind } from '../cache/labels.js';

declare module 'fastify' {
  interface FastifyRequest {
    changed<R extends { id: number }>(how: ChangeKind, collection: string, resource: R): void;
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
