/**
 * The open event streams of this instance (GET /events/stream). A stream first
 * catches up by pages of its own (after its Last-Event-ID), then goes live:
 * one shared read of the new events per wake (a NOTIFY 'events_numbered', or
 * the fallback poll) serves every live stream, each taking what its filters
 * match. A stream's `position` is the last id it has looked at, matching or
 * not, so it never sends one twice or skips one: it goes live only once the
 * shared read starts at or before its position.
 *
 * A client that reads too slowly is closed once a megabyte waits for it (it
 * resumes with Last-Event-ID); every stream is closed when the app closes.
 */
import type { ServerResponse } from 'node:http';
import { type EventFilter, type EventRow, eventsRepository, matches, toEvent } from './repository.js';
import type { Queryable } from '../db/pool.js';

const CATCH_UP_PAGE = 100;
const SHARED_PAGE = 500;
const MAX_BUFFERED_BYTES = 1_048_576;

interface Stream {
  filter: EventFilter;
  position: number;
  res: ServerResponse;
  closed: boolean;
}

export interface StreamHub {
  readonly size: number;
  /** Streams events after `after` (or from now) to `res`, whose headers are already written. */
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
  onError: (error: unknown) => void,
) {
  // Where the shared read resumes; undefined while no stream is live.
  let head: number | undefined;
  let fetching = false;
  let again = false;

  async function catchUp(stream: Stream): Promise<void> {
    for (;;) {
      const known = await repository.head();
      const rows = await repository.page(stream.position, CATCH_UP_PAGE, stream.filter);
      if (stream.closed) return;
      for (const row of rows) deliver(stream, row);
      if (rows.length === CATCH_UP_PAGE) continue;
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

  function end(stream: Stream): void {
    if (stream.closed) return;
    stream.closed = true;
    streams.delete(stream);
    live.delete(stream);
    stream.res.end();
  }

  function write(stream: Stream, text: string): void {
    stream.res.write(text);
    if (stream.res.writableLength > MAX_BUFFERED_BYTES) end(stream);
  }

  function deliver(stream: Stream, row: EventRow): void {
    if (row.id <= stream.position || stream.closed) return;
    stream.position = row.id;
    if (matches(stream.filter, row))
      write(stream, `id: ${row.id}\nevent: ${row.type}\ndata: ${JSON.stringify(toEvent(row, prefix))}\n\n`);
  }

  const { catchUp, fetch } = streamReads(eventsRepository(db), live, deliver, onError);

  const heartbeat = setInterval(() => {
    for (const stream of streams) write(stream, ': heartbeat\n\n');
  }, heartbeatMs);
  heartbeat.unref();
  // Notifications can be lost (a listener reconnecting): poll while streams are live.
  const poll = setInterval(() => void fetch(), pollMs);
  poll.unref();

  return {
    get size() {
      return streams.size;
    },
    open(res, filter, after) {
      const stream: Stream = { filter, position: after, res, closed: false };
      streams.add(stream);
      res.on('close', () => end(stream));
      catchUp(stream).catch((error: unknown) => {
        onError(error);
        end(stream);
      });
    },
    wake() {
      void fetch();
    },
    close() {
      clearInterval(heartbeat);
      clearInterval(poll);
      for (const stream of streams) end(stream);
    },
  };
}
