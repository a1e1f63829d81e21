/**
 * Decorates the app with the pool (`app.db`), ended when the app closes, and,
 * when replicas are configured (DATABASE_READ_URL), with the router that
 * picks where a read goes (`app.reads`, src/db/replicas.ts). Errors of idle
 * clients (the server ended their connection) cost nothing, as the pool
 * replaces them, but are logged: a stream of them tells an operator something.
 */
import fp from 'fastify-plugin';
import type pg from 'pg';
import { createPool } from '../db/pool.js';
import { createReadRouter, type ReadRouter } from '../db/replicas.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: pg.Pool;
    /** Null without replicas: every read goes to `db`. */
    reads: ReadRouter | null;
  }
}

export interface DbOptions {
  connectionString: string;
  max: number;
  statementTimeoutMs: number;
  preparedStatements: boolean;
  readUrls: string[];
  readMaxLagMs: number;
}

/**
 * Gives every connection of the pool an 'error' listener for its whole life.
 * pg-pool removes its idle listener when it hands a client out, and
 * `await pool.connect()` resumes a microtask later: a server's FATAL message
 * (PostgreSQL killed, the connection terminated) read in between was an
 * 'error' event nobody listened to, which ended the process. The client is
 * then broken: its next query fails and the pool discards it on release.
 */
function guarded(pool: pg.Pool): pg.Pool {
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

export default fp<DbOptions>(
  async (app, { connectionString, max, statementTimeoutMs, preparedStatements, readUrls, readMaxLagMs }) => {
    const poolOptions = {
      statementTimeoutMs,
      preparedStatements,
      onIdleError: (error: Error) => app.log.warn({ err: error }, 'an idle database connection failed; the pool replaces it'),
    };
    const pool = guarded(createPool(connectionString, max, poolOptions));
    app.decorate('db', pool);
    let reads: ReadRouter | null = null;
    if (readUrls.length > 0) {
      const warned = new Set<number>();
      reads = createReadRouter({
        primary: pool,
        sampler: guarded(createPool(connectionString, 1, poolOptions)),
        replicas: readUrls.map((url) => guarded(createPool(url, max, poolOptions))),
        maxLagMs: readMaxLagMs,
        // Once per replica and process: a down replica fails every check, a few times a second.
        onCheckError: (error, replica) => {
          if (warned.has(replica)) return;
          warned.add(replica);
          app.log.warn({ err: error, replica }, replica < 0 ? 'could not read the primary WAL position: reads go to the primary' : 'a read replica does not answer: reads go elsewhere');
        },
      });
    }
    app.decorate('reads', reads);
    app.addHook('onClose', async () => {
      await reads?.close();
      await pool.end();
    });
  },
  { name: 'db' },
);
