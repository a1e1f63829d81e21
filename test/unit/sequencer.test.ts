/**
 * The sequencer's pacing (src/events/sequencer.ts): under a stream of wakes it
 * calls number_events() at most every 20 ms, so cheap calls gather events into
 * batches instead of running back to back. The call stands in for the SQL one,
 * answering at once, as a cheap call does on a small queue; what number_events()
 * does in PostgreSQL is tested in test/integration/events-feed.test.ts.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createSequencer } from '../../src/events/sequencer.js';

function counting(numbered: () => number | null) {
  const session = {
    calls: 0,
    connected: () => true,
    async query<R extends pg.QueryResultRow>() {
      session.calls++;
      return { rows: [{ numbered: numbered() }] } as unknown as pg.QueryResult<R>;
    },
  };
  return session;
}

describe('createSequencer', () => {
  it('woken every millisecond, calls at most once per 20 ms (it called back to back before)', async () => {
    const session = counting(() => 1);
    const sequencer = createSequencer(session, { intervalMs: 60_000, onError: () => undefined });
    const began = performance.now();
    while (performance.now() - began < 200) {
      sequencer.wake();
      await sleep(1);
    }
    const elapsed = performance.now() - began;
    await sequencer.close();
    expect(session.calls).toBeGreaterThanOrEqual(2);
    expect(session.calls).toBeLessThanOrEqual(Math.ceil(elapsed / 20) + 1);
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
    let left = 3;
    const session = counting(() => (left-- > 0 ? 10_000 : 0));
    const sequencer = createSequencer(session, { intervalMs: 60_000, onError: () => undefined });
    const began = performance.now();
    await sequencer.run();
    expect(session.calls).toBe(4);
    expect(performance.now() - began).toBeLessThan(20);
    await sequencer.close();
  });
});
