/**
 * Purges expired idempotency keys without an external cron: every instance
 * runs a timer that deletes expired rows in small batches (short statements,
 * no long lock on the table). Lookups ignore expired rows anyway, so the purge
 * is only housekeeping: when it fails (database down) it logs and tries again
 * at the next tick. The timer is unref'd, so it never keeps a process alive.
 */
import fp from 'fastify-plugin';
import { idempotencyKeysRepository } from '../repositories/idempotency-keys.js';

export interface IdempotencyPluginOptions {
  /** Between purges; default 10 minutes. */
  purgeIntervalMs?: number;
}

const BATCH = 500;
// Bounds one tick's work; whatever is left waits for the next tick.
const MAX_BATCHES_PER_TICK = 100;

export default fp<IdempotencyPluginOptions>(
  async (app, { purgeIntervalMs = 10 * 60_000 }) => {
    const keys = idempotencyKeysRepository(app.db);
    let closing = false;
    let running: Promise<void> | undefined;

    async function purge(): Promise<void> {
      try {
        for (let i = 0; i < MAX_BATCHES_PER_TICK && !closing; i++) {
          if ((await keys.purgeExpired(BATCH)) < BATCH) break;
        }
      } catch (error) {
        if (!closing) app.log.warn({ err: error }, 'purging expired idempotency keys failed');
      }
    }

    const timer = setInterval(() => {
      running ??= purge().finally(() => (running = undefined));
    }, purgeIntervalMs);
    timer.unref();

    // Registered after the db plugin, so this runs before the pool is ended.
    app.addHook('onClose', async () => {
      closing = true;
      clearInterval(timer);
      await running;
    });
  },
  { name: 'idempotency', dependencies: ['db'] },
);
