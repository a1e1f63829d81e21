/**
 * Fake time for the service's own timing, inside one test: vi.useFakeTimers fakes the global timers, Date and
 * performance, but the service waits with node:timers/promises and reads node:perf_hooks (src/events/sequencer.ts),
 * whose exports it leaves real. Both are routed to the fake clock here, which only vi.advanceTimersByTimeAsync moves.
 */
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { performance } from 'node:perf_hooks';
import { onTestFinished, vi } from 'vitest';

type TimersPromises = typeof import('node:timers/promises');

// The CommonJS object behind the module's exports: syncBuiltinESMExports copies its properties to them.
const timersPromises = createRequire(import.meta.url)('node:timers/promises') as TimersPromises;

/** setTimeout of node:timers/promises, on the global timers (the fake ones while the clock is). */
function sleepOnGlobalTimers<T>(delay?: number, value?: T): Promise<T> {
  // Called without a value, T is void, and undefined is what it resolves with.
  return new Promise((resolve) => globalThis.setTimeout(() => resolve(value as T), delay));
}

/** Fakes the clock from now to the end of the calling test. Waits take no options (no signal, no ref). */
export function useFakeClock(): void {
  vi.useFakeTimers();
  const sleep = vi.spyOn(timersPromises, 'setTimeout').mockImplementation(sleepOnGlobalTimers);
  // globalThis.performance is the fake one now; node:perf_hooks still exports the real one.
  const now = vi.spyOn(performance, 'now').mockImplementation(() => globalThis.performance.now());
  syncBuiltinESMExports();
  onTestFinished(() => {
    sleep.mockRestore();
    now.mockRestore();
    vi.useRealTimers();
    syncBuiltinESMExports();
  });
}
