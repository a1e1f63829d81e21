/** Purges expired rows on a timer in every instance, in small SKIP LOCKED batches (docs/architecture.md, "Retention"). */
import fp from 'fastify-plugin';
import type { AppConfig } from '../config.js';
import { idempotencyKeysRepository } from '../repositories/idempotency-keys.js';
import { tombstonesRepository } from '../repositories/tombstones.js';
import { eventsRepository } from '../events/repository.js';
import { webhookQueue } from '../events/webhooks/queue.js';

const PURGE_INTERVAL_MS = 10 * 60_000;
const BATCH = 500;
// Bounds one tick's work; whatever is left waits for the next tick.
const MAX_BATCHES_PER_TICK = 100;

export default fp<{ config: AppConfig }>(
  async (app, { config: { tombstoneRetentionSeconds, eventRetentionSeconds } }) => {
    const purges: [string, () => Promise<number>][] = [
      ['expired idempotency keys', () => idempotencyKeysRepository(app.db).purgeExpired(BATCH)],
      [
        'expired tombstones',
        () =>
          tombstonesRepository(app.db, app.resources.tombstoneTables).purgeExpired(tombstoneRetentionSeconds, BATCH),
      ],
      ['expired events', () => eventsRepository(app.db).purgeExpired(eventRetentionSeconds, BATCH)],
      ['finished webhook deliveries', () => webhookQueue(app.db).purgeFinished(eventRetentionSeconds, BATCH)],
    ];
    let closing = false;
    let running: Promise<void> | undefined;

    async function purge(): Promise<void> {
      for (const [what, purgeBatch] of purges) {
        try {
          for (let i = 0; i < MAX_BATCHES_PER_TICK && !closing; i++) {
            if ((await purgeBatch()) < BATCH) break;
          }
        } catch (error) {
          if (!closing) app.log.warn({ err: error }, `purging ${what} failed`);
        }
      }
    }

    const timer = setInterval(() => {
      // A tick still purging when the next comes: the next is skipped.
      if (running) return;
      running = purge().finally(() => {
        running = undefined;
      });
    }, PURGE_INTERVAL_MS).unref();

    // Registered after the db plugin, so this runs before the pool is ended.
    app.addHook('onClose', async () => {
      closing = true;
      clearInterval(timer);
      await running;
    });
  },
  { name: 'retention', dependencies: ['db'] },
);
