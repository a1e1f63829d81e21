/**
 * The instance's session for the event log: it LISTENs on 'events' and 'events_numbered' and runs the sequencer's
 * calls off the request pool; on DATABASE_LISTEN_URL when set (LISTEN does not pass a pooler in transaction mode).
 */
import pg from 'pg';

const RECONNECT_DELAY_MS = 1_000;

export type EventListener = Awaited<ReturnType<typeof listenForEvents>>;

/** Resolves once the first attempt to connect is over (a database down at start is no reason to wait). */
export async function listenForEvents(
  connectionString: string,
  handlers: { onWritten(): void; onNumbered(): void; onLost(error: unknown): void },
) {
  let client: pg.Client | undefined;
  let ready: pg.Client | undefined;
  let retry: NodeJS.Timeout | undefined;
  let closed = false;
  // One warning per outage, not one per attempt.
  let reported = false;

  function drop(lost: pg.Client, error: unknown): void {
    if (lost !== client) return;
    client = undefined;
    ready = undefined;
    lost.end().catch(() => undefined);
    if (closed) return;
    if (!reported) handlers.onLost(error);
    reported = true;
    retry = setTimeout(() => void listen(), RECONNECT_DELAY_MS);
    retry.unref();
  }

  async function listen(): Promise<void> {
    const next = new pg.Client({
      connectionString,
      application_name: 'posts-api-events',
      connectionTimeoutMillis: 3_000,
      keepAlive: true,
    });
    client = next;
    next.on('error', (error) => drop(next, error));
    next.on('end', () => drop(next, new Error('the connection ended')));
    next.on('notification', ({ channel }) => (channel === 'events' ? handlers.onWritten() : handlers.onNumbered()));
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
    handlers.onWritten();
    handlers.onNumbered();
  }

  await listen();

  return {
    connected: () => ready !== undefined,
    query<R extends pg.QueryResultRow>(text: string) {
      if (!ready) return Promise.reject(new Error('the events session is not connected'));
      return ready.query<R>(text);
    },
    async close() {
      closed = true;
      clearTimeout(retry);
      const last = client;
      client = undefined;
      ready = undefined;
      await last?.end().catch(() => undefined);
    },
  };
}
