/** Numbers committed events with number_events() (see its migration) on the events session, one call at a time. */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { serial } from './serial.js';

/** number_events() numbers at most this many per call: a full batch runs again at once. */
const BATCH = 10_000;
const BUSY_RETRY_MS = 20;
/** A call starts at least this long after the one before, so that a stream of writes gathers into batches. */
const GAP_MS = 20;

export interface Sequencer {
  /** Numbers what has committed by now; resolves once done (never rejects). */
  run(): Promise<void>;
  /** run(), not waited for. */
  wake(): void;
  /** Stops the interval; resolves once the call running is over. */
  close(): Promise<void>;
}

export function createSequencer(
  db: { connected(): boolean; query<R extends pg.QueryResultRow>(text: string): Promise<pg.QueryResult<R>> },
  { intervalMs, onError }: { intervalMs: number; onError: (error: unknown) => void },
): Sequencer {
  // Waiting out the gap: the call to come has not begun, so it serves whoever asks now.
  let pacing = false;
  let nextAt = 0;
  let closed = false;
  let failing = false;
  let retry: NodeJS.Timeout | undefined;

  /** One call; true: a full batch, to run again at once. */
  async function call(): Promise<boolean> {
    const wait = nextAt - performance.now();
    if (wait > 0) {
      pacing = true;
      await sleep(wait);
      pacing = false;
    }
    // While the session is away (its loss is logged), other instances number; this one does on reconnecting.
    if (closed || !db.connected()) return false;
    nextAt = performance.now() + GAP_MS;
    try {
      const { rows } = await db.query<{ numbered: number | null }>('SELECT number_events() AS numbered');
      const numbered = rows[0]!.numbered;
      failing = false;
      if (numbered === null) {
        clearTimeout(retry);
        retry = setTimeout(wake, BUSY_RETRY_MS).unref();
      } else if (numbered >= BATCH) {
        nextAt = 0;
        return true;
      }
    } catch (error) {
      // Once per outage: the interval keeps trying.
      if (!failing && !closed) onError(error);
      failing = true;
    }
    return false;
  }

  const calls = serial(call, () => !closed);

  const run = (): Promise<void> => (closed ? Promise.resolve() : calls.run(!pacing));
  const wake = (): void => void run();

  const timer = setInterval(wake, intervalMs).unref();

  return {
    run,
    wake,
    async close() {
      closed = true;
      clearInterval(timer);
      clearTimeout(retry);
      await calls.current();
    },
  };
}
