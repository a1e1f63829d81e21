/** Prometheus metrics (docs/operations.md, "Metrics"), read at scrape time where they can, on a port of their own. */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fp from 'fastify-plugin';
import type { AppConfig } from '../config.js';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { codeOf } from '../db/pool.js';
import { HttpError } from '../errors.js';
import { eventsRepository } from '../events/repository.js';
import { WEBHOOK_ATTEMPTS } from '../events/webhooks/worker.js';
import { ATTEMPT_STATUSES, attemptStatus, type Outcome } from '../events/webhooks/queue.js';

declare module 'fastify' {
  interface FastifyInstance {
    metrics: { serve(host: string, port: number): Promise<number> };
  }
}

type Labels = Record<string, string>;
type SetGauge = (value: number, labels?: Labels) => void;

/** One database read per scrape, shared by the gauges showing its parts: a read under a second old is reused. */
function perScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (last === undefined || performance.now() - last.at > 1_000) last = { at: performance.now(), value: read() };
    return last.value;
  };
}

export default fp<{ config: AppConfig }>(
  async (app, { config: { maxStreams } }) => {
    const registry = new Registry();
    const registers = [registry];
    const counter = (name: string, help: string, ...labelNames: string[]) =>
      new Counter({ name, help, labelNames, registers });
    const gauge = (name: string, help: string, read: (set: SetGauge) => void | Promise<void>) =>
      new Gauge({
        name,
        help,
        labelNames: ['state', 'replica'],
        registers,
        async collect() {
          this.reset();
          try {
            await read((value, labels) => this.set(labels ?? {}, value));
          } catch {
            // A failed read (the database down) leaves its gauge out of the scrape, not the scrape failed.
          }
        },
      });

    // Every metric's name is written whole, never built: the alert rules (deploy/prometheus/rules.yml) and
    // docs/operations.md name them, and a grep from there must land here (test/unit/metric-names.test.ts).
    const duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'requests answered, by method, route template and status class, and how long they took',
      labelNames: ['method', 'route', 'status_class'],
      registers,
    });
    const rateLimited = counter('posts_api_rate_limited_total', 'requests refused with 429, by limit', 'limit');
    const timeouts = counter('posts_api_db_statement_timeouts_total', 'requests failed by PG_STATEMENT_TIMEOUT_MS');
    const replicaReads = counter('posts_api_db_replica_reads_total', 'requests whose reads were sent to a replica');
    const refused = counter('posts_api_event_streams_refused_total', 'event streams refused at MAX_STREAMS');
    const attempts = counter('posts_api_webhook_attempts_total', 'webhook delivery attempts, by result', 'result');
    // Every label value a series from the start: one born at its first event has no rate() until then (no 0 to show).
    for (const limit of ['default', 'auth']) rateLimited.inc({ limit }, 0);
    for (const result of ATTEMPT_STATUSES) attempts.inc({ result }, 0);

    const pool = app.db as typeof app.db & { options: { max: number } };
    gauge('posts_api_db_pool_connections', 'connections of the pool: open, idle, max', (set) => {
      set(pool.totalCount, { state: 'open' });
      set(pool.idleCount, { state: 'idle' });
      set(pool.options.max, { state: 'max' });
    });
    gauge('posts_api_db_pool_waiting', 'queries waiting for a free connection', (set) => set(pool.waitingCount));
    gauge('posts_api_db_replica_lag_seconds', 'age of the newest primary position a replica replayed', (set) => {
      app.replicas?.status().forEach((replica, i) => set(replica.lagMs / 1_000, { replica: String(i) }));
    });
    gauge('posts_api_event_streams_open', 'open event streams of this instance', (set) => set(app.events.hub.size));
    const events = eventsRepository(app.db);
    const sequencer = perScrape(() => Promise.all([events.head(), events.backlog()]));
    new Counter({
      name: 'posts_api_events_numbered_total',
      help: 'the newest event id given (rate() of it: events per second)',
      registers,
      async collect() {
        let head: number;
        try {
          [head] = await sequencer();
        } catch {
          // A failed read keeps the last value: a drop to 0 would read as a counter reset.
          return;
        }
        this.reset();
        this.inc(head);
      },
    });
    gauge('posts_api_events_unnumbered', 'committed events not numbered yet', async (set) => {
      const [, pending] = await sequencer();
      set(pending.unnumbered);
    });
    gauge('posts_api_events_unnumbered_oldest_seconds', 'age of the oldest unnumbered event', async (set) => {
      const [, pending] = await sequencer();
      set(pending.oldestSeconds);
    });
    const backlog = perScrape(() => app.webhooks.backlog());
    gauge('posts_api_webhook_deliveries_due', 'deliveries due and not in flight', async (set) => {
      set((await backlog()).due);
    });
    gauge('posts_api_webhook_deliveries_in_flight', 'deliveries being sent, by every instance', async (set) => {
      set((await backlog()).inFlight);
    });
    gauge('posts_api_webhook_oldest_due_seconds', 'how long the oldest due delivery has waited', async (set) => {
      set((await backlog()).oldestDueSeconds);
    });

    const attempted = (message: unknown) => attempts.inc({ result: attemptStatus(message as Outcome) });
    subscribe(WEBHOOK_ATTEMPTS, attempted);

    app.addHook('onError', (request, _reply, error, done) => {
      if (codeOf(error) === '57014') timeouts.inc();
      // The route's refusal; a shutdown's 503 comes after the streams are closed.
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
      const route = request.routeOptions.url ?? 'unmatched';
      duration.observe(
        { method: request.method, route, status_class: `${Math.floor(status / 100)}xx` },
        reply.elapsedTime / 1_000,
      );
      if (status === 429) rateLimited.inc({ limit: request.routeOptions.config.authRateLimit ? 'auth' : 'default' });
      if (request.replica) replicaReads.inc();
      done();
    });

    let server: Server | undefined;
    app.addHook('onClose', (_app, done) => {
      unsubscribe(WEBHOOK_ATTEMPTS, attempted);
      if (server) server.close(() => done());
      else done();
    });
    app.decorate('metrics', {
      /** GET /metrics on host:port, with the process's own metrics, until the app closes; answers the port. */
      async serve(host: string, port: number) {
        collectDefaultMetrics({ register: registry });
        // Gauges named like counters, which `promtool check metrics` rejects; sum() of their gauges by type
        // (nodejs_active_handles{type}, …) gives the same.
        registry.removeSingleMetric('nodejs_active_handles_total');
        registry.removeSingleMetric('nodejs_active_requests_total');
        registry.removeSingleMetric('nodejs_active_resources_total');
        server = createServer((req, res) => {
          if (req.method !== 'GET' || req.url !== '/metrics') {
            res.writeHead(404).end();
            return;
          }
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
  // Its gauges read what these decorate: the pool, request.replica, the stream hub, the webhook backlog.
  { name: 'metrics', dependencies: ['db', 'read-routing', 'events', 'webhook-worker'] },
);
