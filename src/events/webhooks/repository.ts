/**
 * All SQL about webhooks as their owners manage them, and the list of their
 * deliveries. The delivery queue itself is in queue.ts.
 */
import type { Queryable } from '../../db/pool.js';
import {
  idColumn,
  runList,
  timestampColumn,
  type ListSource,
  type PageRequest,
  type Sort,
} from '../../db/pagination.js';
import { prepared, sql } from '../../db/sql.js';
import type { EventType } from '../repository.js';
import type { WebhookSortField } from './schemas.js';
import type { StoredSecret } from './secrets.js';

export interface Webhook {
  id: number;
  userId: number;
  url: string;
  types: EventType[] | null;
  description: string | null;
  status: 'active' | 'disabled';
  failingSince: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface Delivery {
  id: number;
  webhookId: number;
  eventId: number;
  attempt: number;
  status: 'pending' | 'delivered' | 'failed' | 'given_up';
  statusCode: number | null;
  error: string | null;
  durationMs: number | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** A change of PATCH: a member present, even null, replaces the stored value. */
export interface WebhookChanges {
  url?: string;
  types?: EventType[] | null;
  description?: string | null;
  status?: 'active' | 'disabled';
}

const COLUMNS = `id, user_id AS "userId", url, types, description, status, iso_utc(failing_since) AS "failingSince",
  iso_utc(created_at) AS "createdAt", iso_utc(updated_at) AS "updatedAt"`;
const DELIVERY_COLUMNS = `id, webhook_id AS "webhookId", event_id AS "eventId", attempt, status, status_code AS "statusCode",
  error, duration_ms AS "durationMs", iso_utc(next_attempt_at) AS "nextAttemptAt",
  iso_utc(created_at) AS "createdAt", iso_utc(updated_at) AS "updatedAt"`;

/** Filter: the owner's id, or undefined for every webhook (an admin). */
const webhookList: ListSource<WebhookSortField, number | undefined> = {
  table: 'webhooks',
  columns: COLUMNS,
  sortColumns: { id: idColumn, createdAt: timestampColumn('created_at') },
  scope: (userId) => (userId === undefined ? [] : [sql`user_id = ${userId}`]),
  // A user holds few webhooks, all of them few enough to count.
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

/** Starts after the newest numbered event: a webhook gets the events that follow its creation. */
/**
 * Creates a webhook unless its owner has `maxPerUser` already (undefined then).
 * Run in a transaction: the owner's lock, taken first, makes the count and the
 * insert one step (the INSERT's snapshot, taken after it, sees every webhook created before).
 */
async function createWebhook(
  db: Queryable,
  id: number,
  userId: number,
  fields: Required<Omit<WebhookChanges, 'status'>>,
  secret: StoredSecret,
  maxPerUser: number,
): Promise<Webhook | undefined> {
  await db.query(prepared(`SELECT pg_advisory_xact_lock(hashtextextended('webhooks of ' || $1, 0))`, [userId]));
  const { rows } = await db.query<Webhook>(
    prepared(
      `INSERT INTO webhooks (id, user_id, url, types, description, secret, secret_sealed, cursor)
           OVERRIDING SYSTEM VALUE
           SELECT $1, $2, $3, $4, $5, $6, $7, (SELECT coalesce(max(id), 0) FROM events)
           WHERE (SELECT count(*) FROM webhooks WHERE user_id = $2) < $8 RETURNING ${COLUMNS}`,
      [id, userId, fields.url, fields.types, fields.description, secret.secret, secret.sealed, maxPerUser],
    ),
  );
  return rows[0];
}

/**
 * Applies a PATCH. Disabling gives up the deliveries still to send;
 * re-enabling starts again after the newest numbered event, with a clean
 * failure record (the events in between are in GET /events).
 */
async function updateWebhook(db: Queryable, id: number, changes: WebhookChanges): Promise<Webhook | undefined> {
  const has = (name: keyof WebhookChanges) => changes[name] !== undefined;
  const { rows } = await db.query<Webhook>(
    prepared(
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
        has('url'),
        changes.url ?? null,
        'types' in changes,
        changes.types ?? null,
        'description' in changes,
        changes.description ?? null,
        changes.status ?? null,
      ],
    ),
  );
  return rows[0];
}

/**
 * Makes a delivery due now, whatever its state, unless an attempt of it is
 * in flight. Undefined: no such delivery of that webhook; null: in flight.
 */
async function retryDelivery(
  db: Queryable,
  webhookId: number,
  deliveryId: number,
): Promise<Delivery | null | undefined> {
  const { rows } = await db.query<Delivery & { inFlight: boolean }>(
    prepared(
      `WITH found AS (
             SELECT id, lease_until > now() AS in_flight FROM webhook_deliveries WHERE id = $1 AND webhook_id = $2 FOR UPDATE
           ), retried AS (
             UPDATE webhook_deliveries d SET status = 'pending', next_attempt_at = now(), lease_until = NULL, updated_at = now()
             FROM found WHERE d.id = found.id AND found.in_flight IS NOT TRUE RETURNING d.*
           )
           SELECT found.in_flight IS TRUE AS "inFlight", r.* FROM found
             LEFT JOIN LATERAL (SELECT ${DELIVERY_COLUMNS} FROM retried) r ON TRUE`,
      [deliveryId, webhookId],
    ),
  );
  const row = rows[0];
  if (!row) return undefined;
  if (row.inFlight) return null;
  const { inFlight: _inFlight, ...delivery } = row;
  return delivery;
}

export function webhooksRepository(db: Queryable) {
  return {
    /** An id for a new webhook: its secret is sealed for that id before the row is written. */
    async nextId(): Promise<number> {
      const { rows } = await db.query<{ id: number }>(`SELECT nextval(pg_get_serial_sequence('webhooks', 'id')) AS id`);
      return rows[0]!.id;
    },

    create: (
      id: number,
      userId: number,
      fields: Required<Omit<WebhookChanges, 'status'>>,
      secret: StoredSecret,
      maxPerUser: number,
    ) => createWebhook(db, id, userId, fields, secret, maxPerUser),

    async findById(id: number): Promise<Webhook | undefined> {
      const { rows } = await db.query<Webhook>(prepared(`SELECT ${COLUMNS} FROM webhooks WHERE id = $1`, [id]));
      return rows[0];
    },

    list(userId: number | undefined, sort: Sort<WebhookSortField>, page: PageRequest) {
      return runList<Webhook, WebhookSortField, number | undefined>(db, webhookList, userId, sort, page);
    },

    update: (id: number, changes: WebhookChanges) => updateWebhook(db, id, changes),

    /** Its deliveries go with it (ON DELETE CASCADE); an attempt in flight finds nothing to record. */
    async delete(id: number): Promise<boolean> {
      const { rowCount } = await db.query(prepared('DELETE FROM webhooks WHERE id = $1', [id]));
      return rowCount === 1;
    },

    /** Newest first; null when the webhook does not exist. */
    deliveries(webhookId: number, page: PageRequest) {
      return runList<Delivery, 'id', number>(db, deliveryList, webhookId, { field: 'id', descending: true }, page);
    },

    retry: (webhookId: number, deliveryId: number) => retryDelivery(db, webhookId, deliveryId),
  };
}
