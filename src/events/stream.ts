/**
 * The open event streams of this instance (GET /events/stream). A stream
 * catches up by pages of its own (after its Last-Event-ID), then goes live:
 * one shared read of the new events per wake (a NOTIFY 'events_numbered', or
 * the fallback poll) serves every live stream, each taking what its filters
 * match. A stream's `position` is the last id it has looked at, matching or
 * not, so it never sends one twice or skips one: it goes live only once the
 * shared read starts at or before its position.
 *
 * Writes respect the socket: a live stream whose client has not taken what
 * was written leaves the shared read and, once drained, catches up by pages
 * again at the client's pace, so what waits for a client is at most a page in
 * memory (the rest is in the database). A client that takes nothing for two
 * heartbeats while output waits is disconnected; a stream counts against
 * MAX_STREAMS until its connection is closed.
 */
import type { ServerResponse } from 'node:http';
import { type EventFilter, type EventRow, eventsRepository, matches, toEvent } from './repository.js';
import type { Queryable } from '../db/pool.js';

const CATCH_UP_PAGE = 100;
const SHARED_PAGE = 100;

interface Stream {
  filter: EventFilter;
  position: number;
  res: ServerResponse;
  closed: boolean;
}

export interface StreamHub {
  /** Open streams and places reserved for streams being opened. */
  readonly size: number;
  /** Takes a place if fewer than `max` are taken, at once (no await: a burst cannot overshoot). */
  reserve(max: number): boolean;
  /** Gives back a place reserved for a stream that did not open. */
  release(): void;
  /** Streams events after `after` to `res` (headers written) on a reserved place, given back when it closes. */
  open(res: ServerResponse, filter: EventFilter, after: number): void;
  wake(): void;
  close(): void;
}

/**
 * A stream's catch-up and the shared read of new events: they share where the
 * shared read resumes, which a catch-up joins.
 */
function streamReads(
  repository: ReturnType<typeof eventsRepository>,
  live: Set<Stream>,
  deliver: (stream: Stream, row: EventRow) => void,
  drained: (stream: Stream) => Promise<void>,
  onError: (error: unknown) => void,
) {
  // Where the shared read resumes; undefined while no stream is live.
  let head: number | undefined;
  let fetching = false;
  let again = false;

  async function catchUp(stream: Stream): Promise<void> {
    for (;;) {
      await drained(stream);
      const known = await repository.head();
      const rows = await repository.page(stream.position, CATCH_UP_PAGE, stream.filter);
      for (const row of rows) {
        await drained(stream);
        if (stream.closed) return;
        deliver(stream, row);
      }
      if (rows.length === CATCH_UP_PAGE) continue;
      await drained(stream);
      if (stream.closed) return;
      // Every event up to `known` has been looked at.
      stream.position = Math.max(stream.position, known);
      head ??= stream.position;
      if (head <= stream.position) {
        live.add(stream);
        // What was numbered since `known` may have been announced before it was live.
        void fetch();
        return;
      }
    }
  }

  async function fetch(): Promise<void> {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      do {
        again = false;
        if (live.size === 0 || head === undefined) {
          head = undefined;
          break;
        }
        const rows = await repository.page(head, SHARED_PAGE);
        for (const row of rows) for (const stream of live) deliver(stream, row);
        if (rows.length > 0) head = rows[rows.length - 1]!.id;
        if (rows.length === SHARED_PAGE) again = true;
      } while (again);
    } catch (error) {
      onError(error);
    } finally {
      fetching = false;
    }
  }

  return { catchUp, fetch };
}

export function createStreamHub(
  db: Queryable,
  {
    prefix,
    heartbeatMs,
    pollMs,
    onError,
  }: { prefix: string; heartbeatMs: number; pollMs: number; onError(error: unknown): void },
): StreamHub {
  const streams = new Set<Stream>();
  const live = new Set<Stream>();
  let places = 0;

  /** Resolves once what was written has gone to the socket (or the stream closed); a client stalled this long is cut. */
  function drained(stream: Stream): Promise<void> {
    const { res } = stream;
    if (stream.closed || !res.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const stalled = setTimeout(() => res.destroy(), 2 * heartbeatMs);
      const done = () => {
        clearTimeout(stalled);
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  }

  /** Catches a stream up, live or not: on failure it is closed (the client resumes with Last-Event-ID). */
  function pump(stream: Stream): void {
    catchUp(stream).catch((error: unknown) => {
      onError(error);
      stream.res.destroy();
    });
  }

  function write(stream: Stream, text: string): void {
    // Full: it leaves the shared read and catches up once drained.
    if (!stream.res.write(text) && live.delete(stream)) pump(stream);
  }

  function deliver(stream: Stream, row: EventRow): void {
    if (row.id <= stream.position || stream.closed) return;
    stream.position = row.id;
    if (matches(stream.filter, row))
      write(stream, `id: ${row.id}\nevent: ${row.type}\ndata: ${JSON.stringify(toEvent(row, prefix))}\n\n`);
  }

  const { catchUp, fetch } = streamReads(eventsRepository(db), live, deliver, drained, onError);

  const heartbeat = setInterval(() => {
    for (const stream of streams) if (!stream.res.writableNeedDrain) write(stream, ': heartbeat\n\n');
  }, heartbeatMs);
  heartbeat.unref();
  // Notifications can be lost (a listener reconnecting): poll while streams are live.
  const poll = setInterval(() => void fetch(), pollMs);
  poll.unref();

  return {
    get size() {
      return places;
    },
    reserve(max) {
      if (places >= max) return false;
      places += 1;
      return true;
    },
    release() {
      places -= 1;
    },
    open(res, filter, after) {
      const stream: Stream = { filter, position: after, res, closed: false };
      const closed = () => {
        if (stream.closed) return;
        stream.closed = true;
        streams.delete(stream);
        live.delete(stream);
        places -= 1;
      };
      res.on('close', closed);
      // Gone while it was being opened: 'close' has been and gone.
      if (!res.socket || res.socket.destroyed) return closed();
      streams.add(stream);
      pump(stream);
    },
    wake() {
      void fetch();
    },
    close() {
      clearInterval(heartbeat);
      clearInterval(poll);
      for (const stream of streams) stream.res.end();
    },
  };
}
