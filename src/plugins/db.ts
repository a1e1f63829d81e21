/** Decorates the app with the pool (`app.db`), ended when the app closes. */
import fp from 'fastify-plugin';
import type pg from 'pg';
import { createPool } from '../db/pool.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: pg.Pool;
  }
}

export default fp<{ connectionString: string; max: number }>(
  async (app, { connectionString, max }) => {
    const pool = createPool(connectionString, max);
    app.decorate('db', pool);
    app.addHook('onClose', async () => {
      await pool.end();
    });
  },
  { name: 'db' },
);
