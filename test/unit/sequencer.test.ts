/**
 * The sequencer's pacing (src/events/sequencer.ts): under a stream of wakes it
 * calls number_events() at most every 20 ms, so cheap calls gather events into
 * batches instead of running back to back. The call stands in for the SQL one,
 * answering at once, as a cheap call does on a small queue; what number_events()
 * does in PostgreSQL is tested in test/integration/events-feed.test.ts. Time is
 * the fake clock's (test/helpers/fake-clock.ts): what is checked is when each
 * call began, never how long the test took.
 */
import { performance } from 'node:perf_hooks';
import { describe, expect, it, vi } from 'vitest';
import type pg from 'pg';
import { createSequencer } from '../../src/events/sequencer.js';
import { useFakeClock } from '../helpers/fake-clock.js';

/** A session whose calls answer `numbered()` at once; `began`: when each call began (performance.now()). */
function counting(numbered: () => number | null) {
  const session = {
    calls: 0,
    began: [] as number[],
    connected: () => true,
    async query<R extends pg.QueryResultRow>() {
      session.calls++;
      session.began.push(performance.now());
      return { rows: [{ numbered: numbered() }] } as unknown as pg.QueryResult<R>;
    },
  };
  return session;
}

/** Milliseconds from the first call to each. */
const sinceFirst = (began: number[]) => began.map((at) => at - began[0]!);

describe('createSequencer', () => {
  it('woken every millisecond, calls once per 20 ms, not more (it called back to back before)', async () => {
    useFakeClock();
    const session = counting(() => 1);
    const sequencer = createSequencer(session, { intervalMs: 60_000, onError: () => undefined });
    for (let ms = 0; ms < 200; ms++) {
      sequencer.wake();
      await vi.advanceTimersByTimeAsync(1);
    }
    await sequencer.close();
    expect(sinceFirst(session.began)).toEqual([0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200]);
  });

  it('run() resolves after a call that began after it was asked for', async () => {
    let numberedSoFar = 0;
    const session = counting(() => ++numberedSoFar);
    const sequencer = createSequencer(session, { intervalMs: 60_000, onError: () => undefined });
    sequencer.wake();
    const asked = session.calls;
    await sequencer.run();
    expect(session.calls).toBeGreaterThan(asked);
    await sequencer.close();
  });

  it('a full batch runs again at once, without the gap', async () => {
    useFakeClock();
    let left = 3;
    const session = counting(() => (left-- > 0 ? 10_000 : 0));
    const sequencer = createSequencer(session, { intervalMs: 60_000, onError: () => undefined });
    const ran = sequencer.run();
    // Gaps, had there been any, pass here, and show in the times below instead of leaving run() pending.
    await vi.advanceTimersByTimeAsync(100);
    await ran;
    expect(session.calls).toBe(4);
    expect(sinceFirst(session.began)).toEqual([0, 0, 0, 0]);
    await sequencer.close();
  });
});
