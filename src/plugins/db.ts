/**
 * Decorates the app with the pool (`app.db`), ended when the app closes. Errors
 * of idle clients (the server ended their connection) cost nothing, as the pool
 * replaces them, but are logged: a stream of them tells an operator something.
 */
import fp from 'fastify-plugin';
import type pg from 'pg';
import { createPool } from '../db/pool.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: pg.Pool;
  }
}

export default fp<{ connectionString: string; max: number; statementTimeoutMs: number }>(
  async (app, { connectionString, max, statementTimeoutMs }) => {
    const pool = createPool(connectionString, max, {
      statementTimeoutMs,
      onIdleError: (error) => app.log.warn({ err: error }, 'an idle database connection failed; the pool replaces it'),
    });
    app.decorate('db', pool);
    app.addHook('onClose', async () => {
      await pool.end();
    });
  },
  { name: 'db' },
);
