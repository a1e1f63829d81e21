-- Up Migration

-- The W3C traceparent of the write that made an event, so that its webhook
-- deliveries link to it (docs/operations.md, "Tracing"). The column default
-- reads a setting the service sets before a traced write, only with tracing
-- on (src/telemetry.ts); otherwise it is NULL, at the cost of one lookup.
ALTER TABLE events_pending
  ADD COLUMN traceparent text DEFAULT nullif(current_setting('posts_api.traceparent', true), '');
ALTER TABLE events ADD COLUMN traceparent text;

CREATE OR REPLACE FUNCTION number_events() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  numbered integer;
  top bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(27, 1) THEN
    RETURN NULL;
  END IF;
  SELECT coalesce(max(id), 0) INTO top FROM events;
  -- By ctid (a TID scan): the rows a queue leaves dead until vacuum are never read.
  WITH moved AS (
    DELETE FROM events_pending
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM events_pending ORDER BY tx, seq LIMIT 10000))
    RETURNING tx, seq, type, resource_type, resource_id, post_id, data, created_at, traceparent
  )
  INSERT INTO events (id, seq, type, resource_type, resource_id, post_id, data, created_at, traceparent)
    SELECT top + row_number() OVER (ORDER BY tx, seq), seq, type, resource_type, resource_id, post_id, data, created_at, traceparent
    FROM moved ORDER BY tx, seq;
  GET DIAGNOSTICS numbered = ROW_COUNT;
  IF numbered > 0 THEN
    PERFORM pg_notify('events_numbered', (top + numbered)::text);
  END IF;
  RETURN numbered;
END $$;

-- Down Migration

CREATE OR REPLACE FUNCTION number_events() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  numbered integer;
  top bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(27, 1) THEN
    RETURN NULL;
  END IF;
  SELECT coalesce(max(id), 0) INTO top FROM events;
  WITH moved AS (
    DELETE FROM events_pending
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM events_pending ORDER BY tx, seq LIMIT 10000))
    RETURNING tx, seq, type, resource_type, resource_id, post_id, data, created_at
  )
  INSERT INTO events (id, seq, type, resource_type, resource_id, post_id, data, created_at)
    SELECT top + row_number() OVER (ORDER BY tx, seq), seq, type, resource_type, resource_id, post_id, data, created_at
    FROM moved ORDER BY tx, seq;
  GET DIAGNOSTICS numbered = ROW_COUNT;
  IF numbered > 0 THEN
    PERFORM pg_notify('events_numbered', (top + numbered)::text);
  END IF;
  RETURN numbered;
END $$;

ALTER TABLE events DROP COLUMN IF EXISTS traceparent;
ALTER TABLE events_pending DROP COLUMN IF EXISTS traceparent;
