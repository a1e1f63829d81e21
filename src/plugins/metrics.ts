/**
 * Prometheus metrics (docs/operations.md, "Metrics"): requests are counted in one
 * onResponse hook; the rest is read at scrape time from state the service keeps
 * anyway. Served by serveMetrics on a port of its own, never on the API's.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fp from 'fastify-plugin';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { codeOf } from '../db/pool.js';
import { HttpError } from '../errors.js';
import { eventsRepository } from '../events/repository.js';
import { WEBHOOK_ATTEMPTS } from '../events/webhooks/worker.js';

declare module 'fastify' {
  interface FastifyInstance {
    metrics: {
      registry: Registry;
      /** GET /metrics on host:port, with the process's own metrics, until the app closes; answers the port. */
      serve(host: string, port: number): Promise<number>;
    };
  }
}

/** One read shared by the gauges of one scrape. */
function perScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (!last || performance.now() - last.at > 1_000) last = { at: performance.now(), value: read() };
    return last.value;
  };
}

type Set = (value: number, labels?: Record<string, string>) => void;

export default fp<{ maxStreams: number }>(
  async (app, { maxStreams }) => {
    const registers = [new Registry()];
    const counter = (name: string, help: string, labelNames: string[] = []) =>
      new Counter({ name, help, labelNames, registers });
    // A read that fails (the database down) leaves the gauge without samples rather than failing the scrape.
    const gauge = (name: string, help: string, read: (set: Set) => unknown, labelNames: string[] = []) =>
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        async collect() {
          this.reset();
          await Promise.resolve(read((value, labels) => (labels ? this.set(labels, value) : this.set(value)))).catch(
            () => undefined,
          );
        },
      });

    const duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'requests answered, by method, route template and status class, and how long they took',
      labelNames: ['method', 'route', 'status_class'],
      registers,
    });
    const rateLimited = counter('posts_api_rate_limited_total', 'requests refused with 429, by limit', ['limit']);
    const timeouts = counter('posts_api_db_statement_timeouts_total', 'requests failed by PG_STATEMENT_TIMEOUT_MS');
    const replicaReads = counter('posts_api_db_replica_reads_total', 'requests whose reads were sent to a replica');
    const refused = counter('posts_api_event_streams_refused_total', 'event streams refused at MAX_STREAMS');
    const deliveries = counter('posts_api_webhook_attempts_total', 'webhook delivery attempts, by result', ['result']);

    const pool = app.db as typeof app.db & { options: { max: number } };
    gauge(
      'posts_api_db_pool_connections',
      'connections of the pool: open, idle, max',
      (set) => {
        set(pool.totalCount, { state: 'open' });
        set(pool.idleCount, { state: 'idle' });
        set(pool.options.max, { state: 'max' });
      },
      ['state'],
    );
    gauge('posts_api_db_pool_waiting', 'queries waiting for a free connection', (set) => set(pool.waitingCount));
    gauge(
      'posts_api_db_replica_lag_seconds',
      'age of the newest primary position a replica has replayed',
      (set) => app.replicas?.status().forEach((r, i) => set(r.lagMs / 1_000, { replica: String(i) })),
      ['replica'],
    );

    const events = eventsRepository(app.db);
    const sequencer = perScrape(() => Promise.all([events.head(), events.backlog()]));
    new Counter({
      name: 'posts_api_events_numbered_total',
      help: 'the newest event id given (rate() of it: events per second)',
      registers,
      async collect() {
        const [head] = await sequencer().catch(() => [undefined]);
        this.reset();
        if (head !== undefined) this.inc(head);
      },
    });
    gauge('posts_api_events_unnumbered', 'committed events the sequencer has not numbered yet', async (set) =>
      set((await sequencer())[1].unnumbered),
    );
    gauge('posts_api_events_unnumbered_oldest_seconds', 'age of the oldest unnumbered event', async (set) =>
      set((await sequencer())[1].oldestSeconds),
    );
    gauge('posts_api_event_streams_open', 'open event streams of this instance', (set) => set(app.events.hub.size));
    const backlog = perScrape(() => app.webhooks.backlog());
    gauge('posts_api_webhook_deliveries_due', 'deliveries due and not in flight', async (set) =>
      set((await backlog()).due),
    );
    gauge('posts_api_webhook_deliveries_in_flight', 'deliveries being sent, every instance', async (set) =>
      set((await backlog()).inFlight),
    );
    gauge('posts_api_webhook_oldest_due_seconds', 'how long the oldest due delivery has waited', async (set) =>
      set((await backlog()).oldestDueSeconds),
    );

    const attempted = (outcome: unknown) => {
      const { ok, nextAttemptAt } = outcome as { ok: boolean; nextAttemptAt: Date | null };
      deliveries.inc({ result: ok ? 'delivered' : nextAttemptAt ? 'failed' : 'given_up' });
    };
    subscribe(WEBHOOK_ATTEMPTS, attempted);
    app.addHook('onClose', async () => void unsubscribe(WEBHOOK_ATTEMPTS, attempted));

    app.addHook('onError', (request, _reply, error, done) => {
      if (codeOf(error) === '57014') timeouts.inc();
      else if (
        error instanceof HttpError &&
        error.statusCode === 503 &&
        request.routeOptions.url?.endsWith('/events/stream') &&
        app.events.hub.size >= maxStreams
      )
        refused.inc();
      done();
    });
    app.addHook('onResponse', (request, reply, done) => {
      const status = reply.statusCode;
      duration.observe(
        {
          method: request.method,
          route: request.routeOptions.url ?? 'unmatched',
          status_class: `${(status / 100) | 0}xx`,
        },
        reply.elapsedTime / 1_000,
      );
      if (status === 429) rateLimited.inc({ limit: request.routeOptions.config.authRateLimit ? 'auth' : 'default' });
      if (request.replica) replicaReads.inc();
      done();
    });
    const registry = registers[0]!;
    let server: Server | undefined;
    app.addHook('onClose', (_app, done) => (server ? server.close(() => done()) : done()));
    app.decorate('metrics', {
      registry,
      async serve(host: string, port: number) {
        collectDefaultMetrics({ register: registry });
        server = createServer((req, res) => {
          if (req.method !== 'GET' || req.url !== '/metrics') return void res.writeHead(404).end();
          registry.metrics().then(
            (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
            (error: unknown) => {
              app.log.warn({ err: error }, 'collecting metrics failed');
              res.writeHead(500).end();
            },
          );
        });
        await new Promise<void>((resolve, reject) => server!.once('error', reject).listen(port, host, resolve));
        return (server.address() as AddressInfo).port;
      },
    });
  },
  { name: 'metrics', dependencies: ['db', 'read-routing'] },
);
