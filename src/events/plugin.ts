/**
 * The event log's moving parts on an instance (docs/architecture.md, "Events"), on `app.events` for the routes, and the
 * instance's session for the event log: it LISTENs on 'events' and 'events_numbered' and runs the sequencer's calls off
 * the request pool; on DATABASE_LISTEN_URL when set (LISTEN does not pass a pooler in transaction mode).
 */
import fp from 'fastify-plugin';
import pg from 'pg';
import { createSequencer, type Sequencer } from './sequencer.js';
import { createStreamHub, type StreamHub } from './stream.js';

declare module 'fastify' {
  interface FastifyInstance {
    events: { sequencer: Sequencer; hub: StreamHub };
  }
}

/** The fallbacks while notifications are lost. */
const SEQUENCER_INTERVAL_MS = 250;
const STREAM_POLL_MS = 1_000;
const RECONNECT_DELAY_MS = 1_000;
const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export default fp<{ listenUrl: string; heartbeatMs: number }>(
  async (app, { listenUrl, heartbeatMs }) => {
    const hub = createStreamHub(app.db, {
      resources: app.resources,
      heartbeatMs,
      pollMs: STREAM_POLL_MS,
      onError: (error) => app.log.warn({ err: error }, 'reading events for the open streams failed'),
    });
    let client: pg.Client | undefined;
    // Connected and listening: the sequencer's calls run on it.
    let ready: pg.Client | undefined;
    let retry: NodeJS.Timeout | undefined;
    let closed = false;
    // One warning per outage, not one per attempt.
    let reported = false;
    const sequencer = createSequencer(
      {
        connected: () => ready !== undefined,
        query: (text) => ready?.query(text) ?? Promise.reject(new Error('the events session is not connected')),
      },
      {
        intervalMs: SEQUENCER_INTERVAL_MS,
        onError: (error) => app.log.warn({ err: error }, 'numbering events failed; trying again'),
      },
    );

    function drop(lost: pg.Client, error: unknown): void {
      if (lost !== client) return;
      client = undefined;
      ready = undefined;
      lost.end().catch(() => undefined);
      if (closed) return;
      if (!reported)
        app.log.warn(
          { err: error },
          'the events session is lost: other instances number events, streams poll, until it is back',
        );
      reported = true;
      retry = setTimeout(() => void listen(), RECONNECT_DELAY_MS).unref();
    }

    /** Resolves once the attempt to connect is over (a database down at start is no reason to wait). */
    async function listen(): Promise<void> {
      const next = new pg.Client({
        connectionString: listenUrl,
        application_name: 'posts-api-events',
        connectionTimeoutMillis: 3_000,
        keepAlive: true,
      });
      client = next;
      next.on('error', (error) => drop(next, error));
      next.on('end', () => drop(next, new Error('the connection ended')));
      next.on('notification', ({ channel }) => {
        if (channel === 'events') sequencer.wake();
        else hub.wake();
      });
      try {
        await next.connect();
        await next.query('LISTEN events; LISTEN events_numbered');
      } catch (error) {
        drop(next, error);
        return;
      }
      if (closed) {
        await next.end().catch(() => undefined);
        return;
      }
      reported = false;
      ready = next;
      // Whatever was announced while nobody listened.
      sequencer.wake();
      hub.wake();
    }

    await listen();
    app.decorate('events', { sequencer, hub });

    // This instance's own writes do not NOTIFY (see the events migration): number them once answered.
    // A 5xx may follow a commit whose answer was lost.
    app.addHook('onResponse', (request, reply, done) => {
      if (WRITES.has(request.method) && (reply.statusCode < 300 || reply.statusCode >= 500)) sequencer.wake();
      done();
    });

    // Before the server waits for its connections to end: an open stream never would.
    app.addHook('preClose', (done) => {
      hub.close();
      done();
    });
    // The sequencer first: a call still running on the events session would fail as it ends, and say so.
    app.addHook('onClose', async () => {
      await sequencer.close();
      closed = true;
      clearTimeout(retry);
      const last = client;
      client = undefined;
      ready = undefined;
      await last?.end().catch(() => undefined);
    });
  },
  { name: 'events', dependencies: ['db'] },
);
