/**
 * The open event streams of this instance (docs/architecture.md, "Events"). `position` is the last id a stream looked
 * at, matching or not, so it never sends one twice or skips one.
 */
import type { ServerResponse } from 'node:http';
import { type EventFilter, type EventRow, eventsRepository, matches, toEvent } from './repository.js';
import type { ResourceRegistry } from '../resource.js';
import type { Queryable } from '../db/pool.js';
import { serial } from './serial.js';

const PAGE = 100;

interface Stream {
  filter: EventFilter;
  position: number;
  res: ServerResponse;
  closed: boolean;
}

export interface StreamHub {
  /** Places taken: open streams and those being opened. */
  readonly size: number;
  /** Takes a place if fewer than `max` are taken, at once (no await: a burst cannot overshoot). */
  reserve(max: number): boolean;
  /** Gives back a place reserved for a stream that did not open. */
  release(): void;
  /** Streams events after `after` to `res` (headers written) on a reserved place, given back when it closes. */
  open(res: ServerResponse, filter: EventFilter, after: number): void;
  /** New events may be numbered: the live streams read them. */
  wake(): void;
  close(): void;
}

export function createStreamHub(
  db: Queryable,
  options: { resources: ResourceRegistry; heartbeatMs: number; pollMs: number; onError(error: unknown): void },
): StreamHub {
  const { resources, heartbeatMs, pollMs, onError } = options;
  const repository = eventsRepository(db);
  const streams = new Set<Stream>();
  const live = new Set<Stream>();
  let places = 0;
  // Where the shared read resumes; undefined while no stream is live.
  let head: number | undefined;

  /** Once what was written has gone to the socket, whether the stream is still open; one stalled this long is cut. */
  function drained(stream: Stream): Promise<boolean> {
    const { res } = stream;
    if (stream.closed || !res.writableNeedDrain) return Promise.resolve(!stream.closed);
    return new Promise((resolve) => {
      const stalled = setTimeout(() => res.destroy(), 2 * heartbeatMs);
      const done = () => {
        clearTimeout(stalled);
        res.off('drain', done);
        res.off('close', done);
        resolve(!stream.closed);
      };
      res.on('drain', done);
      res.on('close', done);
    });
  }

  async function catchUp(stream: Stream): Promise<void> {
    for (;;) {
      await drained(stream);
      const known = await repository.head();
      const rows = await repository.page(stream.position, PAGE, stream.filter);
      for (const row of rows) {
        if (!(await drained(stream))) return;
        deliver(stream, row);
      }
      if (rows.length === PAGE) continue;
      if (!(await drained(stream))) return;
      // Every event up to `known` has been looked at: live once the shared read starts at or before it.
      stream.position = Math.max(stream.position, known);
      head ??= stream.position;
      if (head <= stream.position) {
        live.add(stream);
        // What was numbered since `known` may have been announced before it was live.
        fetch();
        return;
      }
    }
  }

  /** One page of the shared read for the live streams; true: a full page, more at once. */
  async function readPage(): Promise<boolean> {
    if (live.size === 0 || head === undefined) {
      head = undefined;
      return false;
    }
    const rows = await repository.page(head, PAGE);
    for (const row of rows) for (const stream of live) deliver(stream, row);
    if (rows.length > 0) head = rows[rows.length - 1]!.id;
    return rows.length === PAGE;
  }

  const reads = serial(readPage, () => true, onError);
  const fetch = () => void reads.run();

  /** On failure the stream is closed: the client resumes with Last-Event-ID. */
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
      write(stream, `id: ${row.id}\nevent: ${row.type}\ndata: ${JSON.stringify(toEvent(row, resources))}\n\n`);
  }

  const heartbeat = setInterval(() => {
    for (const stream of streams) if (!stream.res.writableNeedDrain) write(stream, ': heartbeat\n\n');
  }, heartbeatMs).unref();
  // Notifications can be lost (a listener reconnecting): poll while streams are live.
  const poll = setInterval(fetch, pollMs).unref();

  return {
    get size() {
      return places;
    },
    reserve(max: number): boolean {
      if (places >= max) return false;
      places += 1;
      return true;
    },
    release() {
      places -= 1;
    },
    open(res: ServerResponse, filter: EventFilter, after: number) {
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
    wake: fetch,
    close() {
      clearInterval(heartbeat);
      clearInterval(poll);
      for (const stream of streams) stream.res.end();
    },
  };
}
