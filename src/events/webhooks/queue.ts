/** The delivery queue, all in PostgreSQL (docs/architecture.md, "Webhooks"). */
import type { Queryable } from '../../db/pool.js';
import { firstRow, prepared, written } from '../../db/sql.js';
import { EVENT_COLUMNS, type EventRow } from '../repository.js';
import type { AttemptResult } from './sender.js';

/** Webhooks fanned out per statement, and events read per webhook. */
const FAN_OUT_WEBHOOKS = 50;
const FAN_OUT_EVENTS = 500;
/** Attempts in flight per owner and per target origin, over every instance: one slow host cannot take every sender. */
const MAX_IN_FLIGHT = 4;
const ORIGIN = `substring(w.url from '^[a-z]+://([^/?#]+)')`;

export interface Claimed {
  id: number;
  webhookId: number;
  attempt: number;
  url: string;
  secret: Buffer;
  /** The pool reads timestamps as the API shows them (ISO 8601). */
  createdAt: string;
  event: EventRow | null;
}

/** After a failure, `nextAttemptAt` is when to try again, or null to give up. */
export type Outcome = AttemptResult & { nextAttemptAt: Date | null };

/** What an attempt's outcome makes of its delivery (and the metrics' `result` label). */
export const ATTEMPT_STATUSES = ['delivered', 'failed', 'given_up'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export function attemptStatus(outcome: Pick<Outcome, 'ok' | 'nextAttemptAt'>): AttemptStatus {
  if (outcome.ok) return 'delivered';
  // A failure with no attempt to come is the last one.
  if (outcome.nextAttemptAt === null) return 'given_up';
  return 'failed';
}

export interface WebhookQueue {
  /** One batch of fan-out; answers how many webhooks moved (0: all caught up). */
  fanOut(): Promise<number>;
  /**
   * Leases up to `slots` due deliveries for `leaseMs`, oldest due first, while their owner and their origin each
   * have fewer than MAX_IN_FLIGHT leased: the rest wait, so others' go first.
   */
  claim(slots: number, leaseMs: number): Promise<Claimed[]>;
  /**
   * False when this sender no longer holds the attempt. A failure lasting `disableAfterSeconds` disables the webhook
   * and gives up its other deliveries; one ending after its webhook was disabled is given up too.
   */
  record(claimed: Claimed, outcome: Outcome, disableAfterSeconds: number): Promise<boolean>;
  /** Deletes up to `batch` finished deliveries older than `retentionSeconds`; answers how many. */
  purgeFinished(retentionSeconds: number, batch: number): Promise<number>;
  backlog(): Promise<Backlog>;
}

/** The delivery backlog over every instance, for the metrics: due and not in flight, the oldest due one's wait (s). */
export interface Backlog {
  due: number;
  oldestDueSeconds: number;
  inFlight: number;
}

export function webhookQueue(db: Queryable): WebhookQueue {
  return {
    fanOut: () =>
      written(
        db,
        `WITH head AS (SELECT coalesce(max(id), 0) AS id FROM events),
           hooks AS (
             SELECT w.id, w.cursor, w.types FROM webhooks w, head
             WHERE w.status = 'active' AND w.cursor < head.id
             ORDER BY w.id LIMIT $1 FOR UPDATE OF w SKIP LOCKED
           ),
           batch AS (
             SELECT h.id AS webhook_id, h.types, e.id AS event_id, e.type FROM hooks h
             CROSS JOIN LATERAL (SELECT id, type FROM events WHERE id > h.cursor ORDER BY id LIMIT $2) e
           ),
           created AS (
             INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at)
             SELECT webhook_id, event_id, now() FROM batch WHERE types IS NULL OR type = ANY(types)
             ON CONFLICT (webhook_id, event_id) DO NOTHING
           )
           UPDATE webhooks w SET cursor = moved.last
           FROM (SELECT webhook_id, max(event_id) AS last FROM batch GROUP BY webhook_id) moved
           WHERE w.id = moved.webhook_id`,
        [FAN_OUT_WEBHOOKS, FAN_OUT_EVENTS],
      ),

    async claim(slots: number, leaseMs: number): Promise<Claimed[]> {
      const { rows } = await db.query<Claimed>(
        prepared(
          `WITH busy AS (
               SELECT w.user_id, ${ORIGIN} AS origin FROM webhook_deliveries f JOIN webhooks w ON w.id = f.webhook_id
               WHERE f.lease_until IS NOT NULL AND f.lease_until > now()
             ), candidates AS (
               SELECT c.id, c.next_attempt_at, w.user_id, ${ORIGIN} AS origin FROM webhooks w CROSS JOIN LATERAL (
                 SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
                 WHERE d.webhook_id = w.id AND d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())
                 ORDER BY d.next_attempt_at LIMIT $3
               ) c
               WHERE w.status = 'active'
             ), ranked AS (
               SELECT c.id,
                 row_number() OVER (PARTITION BY c.user_id ORDER BY c.next_attempt_at, c.id)
                   + (SELECT count(*) FROM busy b WHERE b.user_id = c.user_id) AS by_owner,
                 row_number() OVER (PARTITION BY c.origin ORDER BY c.next_attempt_at, c.id)
                   + (SELECT count(*) FROM busy b WHERE b.origin = c.origin) AS by_origin
               FROM candidates c
             ), locked AS (
               SELECT d.id FROM webhook_deliveries d WHERE d.id IN (SELECT id FROM ranked WHERE by_owner <= $3 AND by_origin <= $3)
                 AND d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())
               ORDER BY d.next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
             )
             UPDATE webhook_deliveries d SET attempt = d.attempt + 1, lease_until = now() + make_interval(secs => $2::float8 / 1000)
             FROM locked, webhooks w
             WHERE d.id = locked.id AND w.id = d.webhook_id
             RETURNING d.id, d.webhook_id AS "webhookId", d.attempt, w.url, w.secret,
               d.created_at AS "createdAt",
               (SELECT to_jsonb(e) FROM (SELECT ${EVENT_COLUMNS}, traceparent FROM events WHERE id = d.event_id) e) AS event`,
          [slots, leaseMs, MAX_IN_FLIGHT],
        ),
      );
      return rows;
    },

    async record(claimed: Claimed, outcome: Outcome, disableAfterSeconds: number): Promise<boolean> {
      const status = attemptStatus(outcome);
      const recorded = await firstRow<{ recorded: boolean }>(
        db,
        `WITH hook AS (
             SELECT id, failing_since, (NOT $8 AND failing_since <= now() - make_interval(secs => $9)) AS disabling,
               (NOT $8 AND status = 'disabled') AS stopped
             FROM webhooks WHERE id = $10
           ), recorded AS (
             UPDATE webhook_deliveries d SET
               status = CASE WHEN hook.disabling OR hook.stopped THEN 'given_up' ELSE $3 END, status_code = $4, error = $5, duration_ms = $6,
               next_attempt_at = CASE WHEN hook.disabling OR hook.stopped THEN NULL ELSE $7::timestamptz END,
               lease_until = NULL, updated_at = now()
             FROM hook WHERE d.id = $1 AND d.attempt = $2 AND d.lease_until IS NOT NULL RETURNING d.id
           ), changed AS (
             UPDATE webhooks w SET
               failing_since = CASE WHEN $8 THEN NULL ELSE coalesce(w.failing_since, now()) END,
               status = CASE WHEN hook.disabling THEN 'disabled' ELSE w.status END,
               updated_at = now()
             FROM hook WHERE w.id = hook.id AND EXISTS (SELECT 1 FROM recorded)
               AND CASE WHEN $8 THEN hook.failing_since IS NOT NULL ELSE hook.failing_since IS NULL OR hook.disabling END
           ), given_up AS (
             UPDATE webhook_deliveries d SET status = 'given_up', next_attempt_at = NULL, updated_at = now()
             FROM hook WHERE hook.disabling AND d.webhook_id = hook.id AND d.id <> $1
               AND d.next_attempt_at IS NOT NULL AND d.lease_until IS NULL AND EXISTS (SELECT 1 FROM recorded)
           )
           SELECT EXISTS (SELECT 1 FROM recorded) AS recorded`,
        [
          claimed.id,
          claimed.attempt,
          status,
          outcome.statusCode,
          outcome.error,
          outcome.durationMs,
          outcome.ok ? null : outcome.nextAttemptAt,
          outcome.ok,
          disableAfterSeconds,
          claimed.webhookId,
        ],
      );
      return recorded!.recorded;
    },

    purgeFinished: (retentionSeconds: number, batch: number) =>
      written(
        db,
        `DELETE FROM webhook_deliveries WHERE id IN (
             SELECT id FROM webhook_deliveries
             WHERE next_attempt_at IS NULL AND lease_until IS NULL AND updated_at < now() - make_interval(secs => $1)
             LIMIT $2 FOR UPDATE SKIP LOCKED
           )`,
        [retentionSeconds, batch],
      ),

    async backlog(): Promise<Backlog> {
      const { rows } = await db.query<Backlog>(
        `SELECT
             (SELECT count(*) FROM webhook_deliveries WHERE next_attempt_at <= now() AND (lease_until IS NULL OR lease_until <= now()))::int AS due,
             coalesce((SELECT extract(epoch FROM now() - min(next_attempt_at)) FROM webhook_deliveries
               WHERE next_attempt_at <= now() AND (lease_until IS NULL OR lease_until <= now())), 0)::float8 AS "oldestDueSeconds",
             (SELECT count(*) FROM webhook_deliveries WHERE lease_until > now())::int AS "inFlight"`,
      );
      return rows[0]!;
    },
  };
}
