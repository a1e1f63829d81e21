/**
 * Process entry: config, database, app, listen, graceful close. The embedded
 * database's module is imported only without DATABASE_URL: production installs lack it.
 */
// First: tracing, when on, hooks the modules the app imports later.
import { stopTracing, tracing } from './telemetry.js';
import closeWithGrace from 'close-with-grace';
import type { DestinationStream } from 'pino';
import type PinoPretty from 'pino-pretty';
import { describeConnections, describeSettings, readConfiguration } from './config.js';
import type { App } from './app.js';
import { parseCommandLine, type CommandSpec } from './command-line.js';
import type { EmbeddedPostgresServer } from './dev/embedded.js';

const SERVER: CommandSpec = {
  scripts: ['start', 'start:prod'],
  synopsis: '[--help]',
  help: `Serves the API on HOST:PORT (default 127.0.0.1:3000). Without DATABASE_URL it runs an
embedded PostgreSQL (development only) and applies the migrations itself. SIGTERM or
Ctrl-C stops it gracefully, the embedded database with it.

Settings are environment variables; .env in the working directory adds to them (a
variable set in the environment wins). Each, with its default (see .env.example):
${describeSettings()}

options:
  -h, --help   print this help and exit`,
};

const LISTEN_ERRORS: Record<string, string> = {
  EADDRINUSE: 'the port is already in use; stop what uses it or set another PORT',
  EACCES: 'permission denied (ports below 1024 need privileges); set another PORT',
  EADDRNOTAVAIL: 'no such address on this machine; set another HOST',
  ENOTFOUND: 'no such address on this machine; set another HOST',
};

/** Pretty logs on a terminal when pino-pretty (a dev dependency) is installed; JSON lines otherwise. */
async function terminalLogStream(): Promise<DestinationStream | undefined> {
  if (!process.stdout.isTTY) return undefined;
  let pretty: typeof PinoPretty;
  try {
    pretty = (await import('pino-pretty')).default;
  } catch {
    // A production install (npm ci --omit=dev) has no pino-pretty.
    return undefined;
  }
  return pretty({ translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' });
}

parseCommandLine(SERVER, process.argv.slice(2));
const config = readConfiguration();

let app: App | undefined;
let embedded: EmbeddedPostgresServer | undefined;
const stop = async (): Promise<void> => {
  await app?.close();
  await embedded?.stop();
  await stopTracing();
};
// From the start, so that a signal during start-up also stops the embedded database. SIGINT is ours (below): npm
// forwards the Ctrl-C the terminal sent the server too, so a later SIGINT waits for the close the delay bounds.
const grace = closeWithGrace({ delay: 10_000, skip: ['SIGINT'] }, async ({ signal: by, err, manual }) => {
  const signal = manual ? 'SIGINT' : by;
  if (!app) {
    // Nothing to drain yet. Exiting now stops the embedded database (its exit hook) at once,
    // rather than after the migration or connection it cuts short has failed.
    console.error(err ? `start-up failed: ${err.message}` : `${signal} during start-up: stopping`);
    process.exit(err ? 1 : 0);
  }
  if (err) app.log.error({ err }, 'shutting down after an error');
  else app.log.info({ signal }, 'shutting down');
  await stop();
});
process.once('SIGINT', () => void grace.close());
// Keeps Node's default (exit at once) off for the SIGINTs after the first.
process.on('SIGINT', () => {});

try {
  // Only now: --help and a configuration error answer at once, without loading the app.
  const [{ buildApp }, { migrate }, { checkDatabaseAtStart }] = await Promise.all([
    import('./app.js'),
    import('./db/migrate.js'),
    import('./plugins/db.js'),
  ]);
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    const { startDevelopmentDatabase } = await import('./dev/embedded.js');
    console.log(
      `DATABASE_URL is unset: starting an embedded PostgreSQL in ${config.embeddedPg.dataDir} on port ${config.embeddedPg.port}`,
    );
    embedded = await startDevelopmentDatabase(config.embeddedPg);
    databaseUrl = embedded.url;
    await migrate(databaseUrl, (msg) => console.log(msg));
  } else {
    await checkDatabaseAtStart(databaseUrl);
  }
  app = await buildApp({ ...config, databaseUrl }, { logStream: await terminalLogStream() });
  tracing.warn = (message) => app!.log.warn(message);
  await app.listen({ host: config.host, port: config.port });

  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const bracketed = (host: string) => (host.includes(':') ? `[${host}]` : host);
  const url = `http://${['0.0.0.0', '::'].includes(config.host) ? 'localhost' : bracketed(config.host)}:${port}${config.apiPrefix}`;
  const uses = { ...describeConnections(config, databaseUrl), tracing: tracing.exportsTo };
  if (embedded) uses.database += ` (embedded, ${config.embeddedPg.dataDir})`;
  app.log.info(
    { url, docs: `${url}/docs`, ...uses },
    `listening on ${url} (docs: ${url}/docs); database ${uses.database}; rate limits in ${uses.rateLimitStore}; ` +
      `shared cache ${uses.sharedCache}; read replicas ${uses.replicas}; tracing ${uses.tracing}`,
  );
  if (config.metrics) {
    const { host, port } = config.metrics;
    // Metrics are worth less than the API they describe: a port taken is said, not fatal.
    await app.metrics.serve(host, port).then(
      (bound) => app!.log.info(`metrics on http://${bracketed(host)}:${bound}/metrics`),
      (error: Error) =>
        app!.log.warn(`no metrics: cannot listen on ${host}:${port} (${error.message}); set METRICS_PORT`),
    );
  }
} catch (error) {
  const listen = LISTEN_ERRORS[(error as NodeJS.ErrnoException | undefined)?.code ?? ''];
  if (listen) console.error(`cannot listen on HOST=${config.host} PORT=${config.port}: ${listen}`);
  else console.error(error instanceof Error ? error.message : error);
  await stop().catch(() => {});
  process.exit((error as { exitCode?: number }).exitCode ?? 1);
}
