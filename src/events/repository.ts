/** The SQL of the event log: only numbered events are read (events_pending waits for the sequencer). */
import type { Queryable } from '../db/pool.js';
import { join, raw, sql, toQuery } from '../db/sql.js';
import type { EventType, ResourceRegistry } from '../resource.js';

export type { EventType };

export interface EventRow {
  id: number;
  type: EventType;
  createdAt: string;
  resourceType: string;
  resourceId: number;
  postId: number | null;
  data: Record<string, unknown>;
  /** The writer's trace context, read for webhook deliveries only. */
  traceparent?: string | null;
}

/** As the routes' query names it. */
export interface EventFilter {
  type?: readonly EventType[] | undefined;
  post?: number | undefined;
}

/** The event object of docs/api.md §12, as the feed, the streams and webhooks send it. */
export interface EventObject {
  id: number;
  type: EventType;
  createdAt: string;
  resource: { type: string; id: number; path: string };
  data: Record<string, unknown>;
}

/** The event object of docs/api.md §12; its resource's path as its declaration gives it. */
export function toEvent(row: EventRow, resources: Pick<ResourceRegistry, 'eventPath'>): EventObject {
  const path = resources.eventPath(row.resourceType, row.resourceId, row.postId);
  return {
    id: row.id,
    type: row.type,
    createdAt: row.createdAt,
    resource: { type: row.resourceType, id: row.resourceId, path },
    data: row.data,
  };
}

export const matches = (filter: EventFilter, row: EventRow): boolean =>
  (filter.type === undefined || filter.type.includes(row.type)) &&
  (filter.post === undefined || row.postId === filter.post);

// iso_utc in SQL: these columns are also read by to_jsonb (webhook deliveries), which the pool does not parse.
export const EVENT_COLUMNS = `id::float8 AS id, type, iso_utc(created_at) AS "createdAt", resource_type AS "resourceType",
  resource_id::float8 AS "resourceId", post_id::float8 AS "postId", data`;

export interface EventsRepository {
  page(after: number, limit: number, filter?: EventFilter): Promise<EventRow[]>;
  head(): Promise<number>;
  bounds(): Promise<{ floor: number; head: number }>;
  purgeExpired(retentionSeconds: number, batch: number): Promise<number>;
  /** Committed events not numbered yet, and the age of the oldest. */
  backlog(): Promise<{ unnumbered: number; oldestSeconds: number }>;
}

export function eventsRepository(db: Queryable): EventsRepository {
  return {
    async page(after: number, limit: number, filter: EventFilter = {}): Promise<EventRow[]> {
      // Only the conditions asked for: ?post= then walks its (post_id, id) index.
      const conditions = [sql`id > ${after}`];
      if (filter.type !== undefined) conditions.push(sql`type = ANY(${filter.type})`);
      if (filter.post !== undefined) conditions.push(sql`post_id = ${filter.post}`);
      const { rows } = await db.query<EventRow>(
        toQuery(
          sql`SELECT ${raw(EVENT_COLUMNS)} FROM events WHERE ${join(conditions, ' AND ')} ORDER BY events.id LIMIT ${limit}`,
        ),
      );
      return rows;
    },

    async head(): Promise<number> {
      const { rows } = await db.query<{ head: number }>('SELECT coalesce(max(id), 0)::float8 AS head FROM events');
      return rows[0]!.head;
    },

    /** `floor`: below it events were purged (ids have no gaps, purges take the oldest); `head`: the newest ever given. */
    async bounds(): Promise<{ floor: number; head: number }> {
      const { rows } = await db.query<{ floor: number; head: number }>(
        'SELECT coalesce(min(id) - 1, 0)::float8 AS floor, coalesce(max(id), 0)::float8 AS head FROM events',
      );
      return rows[0]!;
    },

    /** Only from the start of the log, so `floor` stays exact, and never the newest: the next ids continue from it. */
    async purgeExpired(retentionSeconds: number, batch: number): Promise<number> {
      const { rowCount } = await db.query(
        `WITH oldest AS (SELECT id, created_at FROM events ORDER BY id LIMIT $2),
         young AS (SELECT min(id) AS id FROM oldest WHERE created_at > now() - make_interval(secs => $1))
         DELETE FROM events WHERE id IN (
           SELECT id FROM oldest WHERE id < coalesce((SELECT id FROM young), (SELECT max(id) FROM events)))`,
        [retentionSeconds, batch],
      );
      return rowCount ?? 0;
    },

    async backlog(): Promise<{ unnumbered: number; oldestSeconds: number }> {
      const { rows } = await db.query<{ unnumbered: number; oldestSeconds: number }>(
        `SELECT count(*)::int AS unnumbered, coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS "oldestSeconds"
         FROM events_pending`,
      );
      return rows[0]!;
    },
  };
}
