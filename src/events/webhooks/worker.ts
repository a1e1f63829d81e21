/**
 * The webhook worker (WEBHOOK_CONCURRENCY > 0): each poll fans events out and sends what is due. Its state is all in
 * the database; on close, attempts in flight are cut and due again at once, for the next instance.
 */
import { channel } from 'node:diagnostics_channel';
import { trace, type Link } from '@opentelemetry/api';
import fp from 'fastify-plugin';
import type { Config } from '../../config.js';
import type { ResourceRegistry } from '../../resource.js';
import { toEvent } from '../repository.js';
import { serial } from '../serial.js';
import { webhookQueue, type Claimed, type Outcome, type WebhookQueue } from './queue.js';
import { send, type AttemptResult } from './sender.js';

declare module 'fastify' {
  interface FastifyInstance {
    webhooks: { wake(): void; backlog: WebhookQueue['backlog'] };
  }
}

/** `resources`: an event's path as its resource declares it. */
type WebhookWorkerOptions = Config['webhooks'] & { resources: ResourceRegistry };

/** Each attempt's outcome, for the metrics (src/plugins/metrics.ts). */
export const WEBHOOK_ATTEMPTS = 'posts-api:webhook-attempt';
const attempts = channel(WEBHOOK_ATTEMPTS);
const tracer = trace.getTracer('posts-api');

/** A lease outlasts the attempt's timeout by this much: the time to record its result. */
const LEASE_MARGIN_MS = 30_000;
const MAX_FAN_OUT_BATCHES = 20;
const MAX_DELAY_MS = 3_600_000;

/**
 * When to try again after attempt `attempt` (1 = the first) failed, or null to give up: exponential backoff with
 * jitter (failures together do not return together), capped, the last attempt made at the give-up time.
 */
export function nextAttemptAt(
  attempt: number,
  createdAt: Date,
  now: Date,
  settings: { retryBaseMs: number; giveUpAfterSeconds: number },
  random = Math.random,
): Date | null {
  const deadline = createdAt.getTime() + settings.giveUpAfterSeconds * 1000;
  if (now.getTime() >= deadline) return null;
  const full = Math.min(settings.retryBaseMs * 2 ** Math.min(attempt - 1, 30), MAX_DELAY_MS);
  const delay = full / 2 + (random() * full) / 2;
  return new Date(Math.min(now.getTime() + delay, deadline));
}

/** A link to the span whose write made the event (its stored traceparent), when there is one. */
function writerOf(traceparent: string | null | undefined): Link[] {
  const [, traceId, spanId, flags] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent ?? '') ?? [];
  return traceId ? [{ context: { traceId, spanId: spanId!, traceFlags: parseInt(flags!, 16), isRemote: true } }] : [];
}

/** Sends one attempt; an attempt cut by `signal` (closing) is due again at once. */
async function sendAttempt(claimed: Claimed, options: WebhookWorkerOptions, signal: AbortSignal): Promise<Outcome> {
  const { event } = claimed;
  let result: AttemptResult = { ok: false, statusCode: null, error: 'the event is no longer retained', durationMs: 0 };
  if (event) {
    try {
      const body = JSON.stringify(toEvent(event, options.resources));
      const attempt = { url: claimed.url, messageId: String(event.id), body, secret: claimed.secret };
      result = await send(attempt, { ...options, signal });
    } catch (error) {
      result = { ok: false, statusCode: null, error: (error as Error).message, durationMs: 0 };
    }
  }
  const now = new Date();
  const retry = signal.aborted ? now : nextAttemptAt(claimed.attempt, new Date(claimed.createdAt), now, options);
  return { ...result, nextAttemptAt: result.ok || !event ? null : retry };
}

export default fp<WebhookWorkerOptions>(
  async (app, options) => {
    const queue = webhookQueue(app.db);
    // Closing: no poll claims anything more; then `shutdown` cuts the attempts in flight.
    let closing = false;
    const shutdown = new AbortController();
    const inFlight = new Set<Promise<void>>();
    let failing = false;

    function start(claimed: Claimed): void {
      const attributes = {
        'webhook.id': claimed.webhookId,
        'webhook.attempt': claimed.attempt,
        'event.id': claimed.event?.id,
      };
      const links = writerOf(claimed.event?.traceparent);
      const running = tracer
        .startActiveSpan('webhook delivery', { root: true, attributes, links }, async (span) => {
          try {
            const outcome = await sendAttempt(claimed, options, shutdown.signal);
            attempts.publish(outcome);
            await queue.record(claimed, outcome, options.disableAfterSeconds);
          } finally {
            span.end();
          }
        })
        .catch((error: unknown) =>
          app.log.warn({ err: error, deliveryId: claimed.id }, 'recording a webhook attempt failed'),
        )
        .finally(() => {
          inFlight.delete(running);
          wake();
        });
      inFlight.add(running);
    }

    /** One poll; true: a full claim may have left more due, to look for without waiting for the poll. */
    async function tick(): Promise<boolean> {
      let full = false;
      try {
        for (let i = 0; i < MAX_FAN_OUT_BATCHES && !closing; i++) {
          if ((await queue.fanOut()) === 0) break;
        }
        const slots = options.concurrency - inFlight.size;
        if (slots > 0 && !closing) {
          const claimed = await queue.claim(slots, options.timeoutMs + LEASE_MARGIN_MS);
          for (const delivery of claimed) start(delivery);
          full = claimed.length === slots;
        }
        if (failing) app.log.info('webhook deliveries resumed');
        failing = false;
      } catch (error) {
        // Once per outage: the poll keeps trying.
        if (!failing && !closing) app.log.warn({ err: error }, 'webhook deliveries paused: the database failed');
        failing = true;
      }
      return full;
    }

    const ticks = serial(tick, () => !closing && inFlight.size < options.concurrency);
    function wake(): void {
      if (!closing) void ticks.run();
    }

    const timer = options.concurrency > 0 ? setInterval(wake, options.pollMs).unref() : undefined;

    app.decorate('webhooks', {
      wake: () => {
        if (options.concurrency > 0) wake();
      },
      backlog: () => queue.backlog(),
    });

    // Registered after the db plugin, so this runs before the pool is ended.
    app.addHook('onClose', async () => {
      clearInterval(timer);
      // The poll running now ends first: a claim answered after the cut below would pick up an attempt just cut
      // (due again at once) and count one more attempt that is never sent.
      closing = true;
      await ticks.current();
      shutdown.abort();
      await Promise.all(inFlight);
    });
  },
  { name: 'webhook-worker', dependencies: ['db', 'events'] },
);
