/** `app.db` and, with replicas, `app.replicas`. Idle-client errors are logged: a stream of them means something. */
import fp from 'fastify-plugin';
import pg from 'pg';
import { APPLICATION_NAME, createPool } from '../db/pool.js';
import { schemaState, shippedMigrations, type SchemaState } from '../db/migrate.js';
import { createReadRouter, type ReadRouter } from '../db/replicas.js';
import { databaseCause } from './errors.js';
import type { AppConfig } from '../config.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: pg.Pool;
    /** Null without replicas: every read goes to `db`. */
    replicas: ReadRouter | null;
  }
}

/** A FATAL read between pg-pool handing a client out and `await connect()` resuming ended the process. */
function guarded(pool: pg.Pool): pg.Pool {
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

export default fp<{ config: AppConfig }>(
  async (app, { config }) => {
    const { databaseUrl, pgPoolMax: max, databaseReadUrls: readUrls, databaseReadMaxLagMs } = config;
    // Once closing, a connection ending is expected: Ctrl-C stops the embedded PostgreSQL at the same time,
    // and its backends can end before this process has read its own SIGINT (seen: 6 ms before), hence the wait.
    let closing = false;
    app.addHook('preClose', (done) => {
      closing = true;
      done();
    });
    const poolOptions = (database: string) => ({
      statementTimeoutMs: config.pgStatementTimeoutMs,
      connectTimeoutMs: config.pgConnectTimeoutMs,
      onIdleError: (error: Error) =>
        setTimeout(() => {
          if (!closing) app.log.warn({ err: error }, 'an idle database connection failed; the pool replaces it');
        }, 250).unref(),
      onStatementNamesLost: (error: Error) =>
        app.log.warn(
          { database, cause: error.message },
          'a connection pooler in transaction mode lost a named prepared statement (PgBouncer before 1.21, or without ' +
            'max_prepared_statements): statements go unnamed from now on',
        ),
    });
    const pool = guarded(createPool(databaseUrl, max, poolOptions('primary')));
    app.decorate('db', pool);
    let replicas: ReadRouter | null = null;
    if (readUrls.length > 0) {
      const warned = new Set<number>();
      replicas = createReadRouter({
        primary: pool,
        sampler: guarded(createPool(databaseUrl, 1, poolOptions('primary'))),
        replicas: readUrls.map((url, i) => guarded(createPool(url, max, poolOptions(`replica ${i}`)))),
        maxLagMs: databaseReadMaxLagMs,
        // Once per replica and process: a down replica fails every check, a few times a second.
        onCheckError: (error, replica) => {
          if (warned.has(replica)) return;
          warned.add(replica);
          app.log.warn(
            { err: error, replica },
            replica < 0
              ? 'could not read the primary WAL position: reads go to the primary'
              : 'a read replica does not answer: reads go elsewhere',
          );
        },
      });
    }
    app.decorate('replicas', replicas);
    app.addHook('onClose', async () => {
      await replicas?.close();
      await pool.end();
    });
  },
  { name: 'db', dependencies: ['errors'] },
);

/** A schema behind this version stops start-up; one ahead (a rolling upgrade) is served; an unreachable database too. */
export async function checkDatabaseAtStart(
  databaseUrl: string,
  warn: (message: string) => void = console.warn,
): Promise<void> {
  const client = new pg.Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 3_000,
    application_name: APPLICATION_NAME,
  });
  client.on('error', () => undefined);
  let state: SchemaState;
  try {
    await client.connect();
    state = await schemaState(client, shippedMigrations());
  } catch (error) {
    const detail = [(error as { code?: string }).code, (error as Error).message].filter(Boolean).join(' ');
    warn(
      `${databaseCause(error) ?? 'the database check failed'} (${detail}): starting anyway; ` +
        'requests and readiness answer 503 until the database answers',
    );
    return;
  } finally {
    await client.end().catch(() => undefined);
  }
  if (state.missing.length) {
    throw Object.assign(
      new Error(
        `the database schema is behind this version: ${state.missing.length} migration(s) not applied ` +
          `(${state.missing.join(', ')}); run \`npm run migrate\` against this database, then start again`,
      ),
      { exitCode: 78 }, // EX_CONFIG, as for a bad setting
    );
  }
  if (state.unknown.length) {
    warn(
      `the database schema is ahead of this version (applied by a newer one: ${state.unknown.join(', ')}); serving, as during a rolling upgrade`,
    );
  }
}
