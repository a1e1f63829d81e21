/** The SQL of webhooks as their owners manage them, of their deliveries' list, their secrets; the queue is queue.ts. */
import { randomBytes } from 'node:crypto';
import type { Queryable } from '../../db/pool.js';
import {
  idColumn,
  runList,
  timestampColumn,
  type ListResult,
  type ListSource,
  type PageRequest,
  type Sort,
} from '../../db/pagination.js';
import { firstRow, prepared, sql } from '../../db/sql.js';
import type { Delivery, Webhook, WebhookChanges, WEBHOOK_SORT_FIELDS } from './schemas.js';

type SortField = (typeof WEBHOOK_SORT_FIELDS)[number];

/** Signing secrets are stored as their raw bytes: every attempt signs with them. */
const PREFIX = 'whsec_';
const SECRET_BYTES = 24;

export function newSecret(): { bytes: Buffer; shown: string } {
  const bytes = randomBytes(SECRET_BYTES);
  return { bytes, shown: PREFIX + bytes.toString('base64') };
}

const COLUMNS = `id, user_id AS "userId", url, types, description, status, failing_since AS "failingSince",
  created_at AS "createdAt", updated_at AS "updatedAt"`;
const DELIVERY_COLUMNS = `id, webhook_id AS "webhookId", event_id AS "eventId", attempt, status, status_code AS "statusCode",
  error, duration_ms AS "durationMs", next_attempt_at AS "nextAttemptAt",
  created_at AS "createdAt", updated_at AS "updatedAt"`;

/** Filter: the owner's id, or undefined for every webhook (an admin). A user's few webhooks are cheap to count. */
const webhookList: ListSource<SortField, number | undefined> = {
  table: 'webhooks',
  columns: COLUMNS,
  sortColumns: { id: idColumn, createdAt: timestampColumn('created_at') },
  scope: (userId) => (userId === undefined ? [] : [sql`user_id = ${userId}`]),
  total: (userId) =>
    userId === undefined
      ? sql`SELECT count(*) FROM webhooks`
      : sql`SELECT count(*) FROM webhooks WHERE user_id = ${userId}`,
};

const deliveryList: ListSource<'id', number> = {
  table: 'webhook_deliveries',
  columns: DELIVERY_COLUMNS,
  sortColumns: { id: idColumn },
  scope: (webhookId) => [sql`webhook_id = ${webhookId}`],
  total: (webhookId) => sql`SELECT count(*) FROM webhook_deliveries WHERE webhook_id = ${webhookId}`,
  parentExists: (webhookId) => sql`EXISTS (SELECT 1 FROM webhooks WHERE id = ${webhookId})`,
};

export interface WebhooksRepository {
  /** In a transaction: the owner's lock makes the count and the insert one step. Undefined past `maxPerUser`. */
  create(
    userId: number,
    fields: Required<Omit<WebhookChanges, 'status'>>,
    maxPerUser: number,
  ): Promise<(Webhook & { secret: string }) | undefined>;
  findById(id: number): Promise<Webhook | undefined>;
  list(userId: number | undefined, sort: Sort<SortField>, page: PageRequest): Promise<ListResult<Webhook>>;
  /** A member present, even null, replaces the stored value; re-enabling starts after the newest event. */
  update(id: number, changes: WebhookChanges): Promise<Webhook | undefined>;
  /** Its deliveries go with it (ON DELETE CASCADE); an attempt in flight finds nothing to record. */
  delete(id: number): Promise<void>;
  /** Newest first; null when the webhook does not exist. */
  deliveries(webhookId: number, page: PageRequest): Promise<ListResult<Delivery>>;
  /** Due now whatever its state, unless in flight. Undefined: no such delivery of that webhook; null: in flight. */
  retry(webhookId: number, deliveryId: number): Promise<Delivery | null | undefined>;
}

export function webhooksRepository(db: Queryable): WebhooksRepository {
  return {
    async create(
      userId: number,
      fields: Required<Omit<WebhookChanges, 'status'>>,
      maxPerUser: number,
    ): Promise<(Webhook & { secret: string }) | undefined> {
      const { bytes, shown } = newSecret();
      await db.query(prepared(`SELECT pg_advisory_xact_lock(hashtextextended('webhooks of ' || $1, 0))`, [userId]));
      const row = await firstRow<Webhook>(
        db,
        `INSERT INTO webhooks (user_id, url, types, description, secret, cursor)
         SELECT $1, $2, $3, $4, $5, (SELECT coalesce(max(id), 0) FROM events)
         WHERE (SELECT count(*) FROM webhooks WHERE user_id = $1) < $6 RETURNING ${COLUMNS}`,
        [userId, fields.url, fields.types, fields.description, bytes, maxPerUser],
      );
      return row && { ...row, secret: shown };
    },

    findById: (id: number) => firstRow<Webhook>(db, `SELECT ${COLUMNS} FROM webhooks WHERE id = $1`, [id]),

    list: (userId: number | undefined, sort: Sort<SortField>, page: PageRequest) =>
      runList<Webhook, SortField, number | undefined>(db, webhookList, userId, sort, page),

    update: (id: number, changes: WebhookChanges) =>
      firstRow<Webhook>(
        db,
        `WITH changed AS (
           UPDATE webhooks w SET
             url = CASE WHEN $2 THEN $3 ELSE url END,
             types = CASE WHEN $4 THEN $5::text[] ELSE types END,
             description = CASE WHEN $6 THEN $7 ELSE description END,
             status = coalesce($8, status),
             failing_since = CASE WHEN $8 = 'active' AND status = 'disabled' THEN NULL ELSE failing_since END,
             cursor = CASE WHEN $8 = 'active' AND status = 'disabled'
               THEN greatest(cursor, (SELECT coalesce(max(id), 0) FROM events)) ELSE cursor END,
             updated_at = now()
           WHERE id = $1 RETURNING *
         ), given_up AS (
           UPDATE webhook_deliveries d SET status = 'given_up', next_attempt_at = NULL, updated_at = now()
           FROM changed WHERE changed.status = 'disabled' AND d.webhook_id = changed.id
             AND d.next_attempt_at IS NOT NULL AND d.lease_until IS NULL
         )
         SELECT ${COLUMNS} FROM changed`,
        [
          id,
          changes.url !== undefined,
          changes.url ?? null,
          'types' in changes,
          changes.types ?? null,
          'description' in changes,
          changes.description ?? null,
          changes.status ?? null,
        ],
      ),

    async delete(id: number): Promise<void> {
      await db.query(prepared('DELETE FROM webhooks WHERE id = $1', [id]));
    },

    deliveries: (webhookId: number, page: PageRequest) =>
      runList<Delivery, 'id', number>(db, deliveryList, webhookId, { field: 'id', descending: true }, page),

    async retry(webhookId: number, deliveryId: number): Promise<Delivery | null | undefined> {
      const row = await firstRow<Delivery & { inFlight: boolean }>(
        db,
        `WITH found AS (
           SELECT id, lease_until > now() AS in_flight FROM webhook_deliveries WHERE id = $1 AND webhook_id = $2 FOR UPDATE
         ), retried AS (
           UPDATE webhook_deliveries d SET status = 'pending', next_attempt_at = now(), lease_until = NULL, updated_at = now()
           FROM found WHERE d.id = found.id AND found.in_flight IS NOT TRUE RETURNING d.*
         )
         SELECT found.in_flight IS TRUE AS "inFlight", r.* FROM found
           LEFT JOIN LATERAL (SELECT ${DELIVERY_COLUMNS} FROM retried) r ON TRUE`,
        [deliveryId, webhookId],
      );
      if (!row) return undefined;
      const { inFlight, ...delivery } = row;
      return inFlight ? null : delivery;
    },
  };
}

/**
 * The seed's demo webhook and one given-up delivery for /docs's retry example, both with id `id` and owned by user
 * `id`, made once. Created disabled: its address does not exist, and an active one would retry for a day.
 */
export async function seedWebhook(db: Queryable, id: number): Promise<void> {
  const { rowCount } = await db.query(
    prepared(
      `INSERT INTO webhooks (id, user_id, url, types, description, status, secret, cursor)
       OVERRIDING SYSTEM VALUE
       VALUES ($1, $1, 'https://hooks.example.com/posts-api', '{post.deleted}', 'demo: an endpoint that does not exist',
         'disabled', $2, (SELECT coalesce(max(id), 0) FROM events))
       ON CONFLICT (id) DO NOTHING`,
      [id, newSecret().bytes],
    ),
  );
  if (!rowCount) return;
  await db.query(
    prepared(
      `INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, error) OVERRIDING SYSTEM VALUE
       VALUES ($1, $1, (SELECT coalesce(max(id), 1) FROM events), 'given_up', 'a seeded example, never sent')`,
      [id],
    ),
  );
}
