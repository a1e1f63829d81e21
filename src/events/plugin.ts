/** The event log's moving parts on an instance (docs/architecture.md, "Events"), on `app.events` for the routes. */
import fp from 'fastify-plugin';
import { createSequencer, type Sequencer } from './sequencer.js';
import { createStreamHub, type StreamHub } from './stream.js';
import { listenForEvents, type EventListener } from './listener.js';

declare module 'fastify' {
  interface FastifyInstance {
    events: { sequencer: Sequencer; hub: StreamHub };
  }
}

/** The fallbacks while notifications are lost. */
const SEQUENCER_INTERVAL_MS = 250;
const STREAM_POLL_MS = 1_000;
const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export default fp<{ listenUrl: string; prefix: string; heartbeatMs: number }>(
  async (app, { listenUrl, prefix, heartbeatMs }) => {
    const hub = createStreamHub(app.db, {
      prefix,
      heartbeatMs,
      pollMs: STREAM_POLL_MS,
      onError: (error) => app.log.warn({ err: error }, 'reading events for the open streams failed'),
    });
    // The sequencer's calls go to the listener's session, once it is there.
    const session: { listener?: EventListener } = {};
    const sequencer = createSequencer(
      { connected: () => session.listener?.connected() ?? false, query: (text) => session.listener!.query(text) },
      {
        intervalMs: SEQUENCER_INTERVAL_MS,
        onError: (error) => app.log.warn({ err: error }, 'numbering events failed; trying again'),
      },
    );
    const listener = await listenForEvents(listenUrl, {
      onWritten: () => sequencer.wake(),
      onNumbered: () => hub.wake(),
      onLost: (error) =>
        app.log.warn(
          { err: error },
          'the events session is lost: other instances number events, streams poll, until it is back',
        ),
    });
    session.listener = listener;
    sequencer.wake();
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
    // The sequencer first: a call still running on the listener's session would fail as it ends, and say so.
    app.addHook('onClose', async () => {
      await sequencer.close();
      await listener.close();
    });
  },
  { name: 'events', dependencies: ['db'] },
);
