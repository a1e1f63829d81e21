-- Up Migration

-- Webhook endpoints and their deliveries (docs/api.md §12, docs/architecture.md
-- "Webhooks"). The delivery queue lives here, in PostgreSQL: claimed with
-- FOR UPDATE SKIP LOCKED by every instance, so a restart loses nothing and
-- several instances share the work.
CREATE TABLE webhooks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  url text NOT NULL,
  -- NULL: every event type.
  types text[],
  description text,
  -- The signing key's raw bytes: every attempt signs with it.
  secret bytea NOT NULL,
  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
  -- The last event id fanned out into deliveries: the next fan-out reads after it.
  cursor bigint NOT NULL,
  -- Since when every attempt has failed; NULL after a success.
  failing_since timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  created_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX webhooks_user_id ON webhooks (user_id, id);
-- Its list has offset pages as of a snapshot (attach_snapshots, in the events migration).
SELECT attach_snapshots('webhooks');

CREATE TABLE webhook_deliveries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  webhook_id bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
  event_id bigint NOT NULL,
  -- Attempts started so far; a claim increments it, so it also names the attempt in flight.
  attempt integer NOT NULL DEFAULT 0,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'given_up')),
  status_code integer,
  error text,
  duration_ms integer,
  -- When the next attempt is due; NULL once delivered or given up.
  next_attempt_at timestamptz,
  -- An attempt in flight holds the row until then; past it (the sender crashed) another instance may claim it.
  lease_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (webhook_id, event_id)
);
-- The queue: only rows still to send are indexed; per endpoint for claims, overall for the backlog.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (webhook_id, next_attempt_at) WHERE next_attempt_at IS NOT NULL;
-- The retention purge of finished deliveries.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at) WHERE next_attempt_at IS NULL;
-- Per endpoint, the attempts in flight (the claim caps them).
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id) WHERE lease_until IS NOT NULL;

-- Down Migration

DROP TABLE IF EXISTS webhook_deliveries;
SELECT detach_snapshots('webhooks');
DROP TABLE IF EXISTS webhooks;
