/**
 * The instance's session that LISTENs for the event log: 'events' (another
 * client wrote: number it) and 'events_numbered' (some instance numbered
 * events: wake the streams). A session of its own, on DATABASE_LISTEN_URL when
 * set (LISTEN does not work through a pooler in transaction mode). Lost, it is
 * opened again a second later; meanwhile the sequencer's interval and the
 * streams' poll (stream.ts) keep events flowing, only later.
 */
import pg from 'pg';

const RECONNECT_DELAY_MS = 1_000;

export interface EventListener {
  close(): Promise<void>;
}

export function listenForEvents(
  connectionString: string,
  handlers: { onWritten(): void; onNumbered(): void; onLost(error: unknown): void },
): EventListener {
  let client: pg.Client | undefined;
  let retry: NodeJS.Timeout | undefined;
  let closed = false;
  // One warning per outage, not one per attempt.
  let reported = false;

  function drop(lost: pg.Client, error: unknown): void {
    if (lost !== client) return;
    client = undefined;
    lost.end().catch(() => undefined);
    if (closed) return;
    if (!reported) handlers.onLost(error);
    reported = true;
    retry = setTimeout(() => void listen(), RECONNECT_DELAY_MS);
    retry.unref();
  }

  async function listen(): Promise<void> {
    const next = new pg.Client({ connectionString, application_name: 'posts-api-events', connectionTimeoutMillis: 3_000, keepAlive: true });
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
    // Whatever was announced while nobody listened.
    handlers.onWritten();
    handlers.onNumbered();
  }

  void listen();

  return {
    async close() {
      closed = true;
      clearTimeout(retry);
      const last = client;
      client = undefined;
      await last?.end().catch(() => undefined);
    },
  };
}
