/**
 * Data is kept only as long as it serves a purpose, without an external cron:
 * - idempotency records: 24 h, the replay window (docs/api.md §8); lookups ignore
 *   older rows anyway. A record whose resource is deleted loses its copy of
 *   the content at once (the posts_forget_idempotent and comments_forget_idempotent triggers).
 * - tombstones of deleted posts and comments (their sort keys, titles
 *   included): TOMBSTONE_RETENTION (default 24 h), how long a cursor naming a
 *   deleted item stays valid.
 * - events: EVENT_RETENTION (default 7 days), oldest first and never the newest
 *   (src/events/repository.ts); a cursor older than what is kept is a 410.
 * - finished webhook deliveries (delivered, given up): EVENT_RETENTION after
 *   their last attempt, as long as the events they could send again.
 * Every instance runs a timer (every 10 minutes) that deletes expired rows in
 * small batches: short statements, no long lock, and FOR UPDATE SKIP LOCKED so
 * instances purging at the same moment share the work instead of waiting on
 * each other; no instance has to be elected. So a row lives at most its
 * retention plus one interval. When a purge fails (database down) it logs and
 * tries again at the next tick. The timer is unref'd: it never keeps a process alive.
 */
import fp from 'fastify-plugin';
import { idempotencyKeysRepository } from '../repositories/idempotency-keys.js';
import { tombstonesRepository } from '../repositories/tombstones.js';
import { eventsRepository } from '../events/repository.js';
import { webhookQueue } from '../events/webhooks/queue.js';

export interface RetentionPluginOptions {
  tombstoneRetentionSeconds: number;
  eventRetentionSeconds: number;
  /** Between purges; default 10 minutes. */
  purgeIntervalMs?: number;
}

const BATCH = 500;
// Bounds one tick's work; whatever is left waits for the next tick.
const MAX_BATCHES_PER_TICK = 100;

export default fp<RetentionPluginOptions>(
  async (app, { tombstoneRetentionSeconds, eventRetentionSeconds, purgeIntervalMs = 10 * 60_000 }) => {
    const keys = idempotencyKeysRepository(app.db);
    const tombstones = tombstonesRepository(app.db);
    const events = eventsRepository(app.db);
    const deliveries = webhookQueue(app.db);
    const purges: [string, () => Promise<number>][] = [
      ['expired idempotency keys', () => keys.purgeExpired(BATCH)],
      ['expired tombstones', () => tombstones.purgeExpired(tombstoneRetentionSeconds, BATCH)],
      ['expired events', () => events.purgeExpired(eventRetentionSeconds, BATCH)],
      ['finished webhook deliveries', () => deliveries.purgeFinished(eventRetentionSeconds, BATCH)],
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
  { name: 'retention', dependencies: ['db'] },
);
