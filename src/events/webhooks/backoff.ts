/**
 * When a failed delivery is tried again: exponential backoff with jitter.
 * Retry n waits base * 2^(n-1), drawn between half and all of it (so many
 * deliveries failing together do not return together), at most MAX_DELAY_MS;
 * none goes past the give-up time, and the last attempt is made at it.
 */
const MAX_DELAY_MS = 3_600_000;

export interface BackoffSettings {
  retryBaseMs: number;
  giveUpAfterSeconds: number;
}

/**
 * After attempt `attempt` (1 = the first) failed at `now` on a delivery made
 * at `createdAt`: when to try again, or null to give up.
 */
export function nextAttemptAt(
  attempt: number,
  createdAt: Date,
  now: Date,
  settings: BackoffSettings,
  random = Math.random,
): Date | null {
  const deadline = createdAt.getTime() + settings.giveUpAfterSeconds * 1000;
  if (now.getTime() >= deadline) return null;
  const full = Math.min(settings.retryBaseMs * 2 ** Math.min(attempt - 1, 30), MAX_DELAY_MS);
  const delay = full / 2 + (random() * full) / 2;
  return new Date(Math.min(now.getTime() + delay, deadline));
}
