-- Up Migration

-- The first response to a POST sent with an Idempotency-Key (docs/api.md §8), written
-- in the same transaction as what it created, so a retry can be answered with it
-- and a failed create leaves nothing behind. Kept 24 h: lookups ignore older rows
-- and the app purges them in small batches (src/plugins/idempotency.ts).
CREATE TABLE idempotency_keys (
  -- 'user:<id>' for authenticated requests, 'anonymous' for sign-ups without a token.
  scope text NOT NULL,
  key text NOT NULL,
  -- SHA-256 of the canonical request (method, route, path params, body), so a
  -- reuse of the key for another request is recognised without storing it.
  request_hash bytea NOT NULL,
  status smallint NOT NULL,
  -- Only the headers that belong to the response (Location, ETag, Content-Type).
  headers jsonb NOT NULL,
  -- The exact bytes sent, so a replay is identical.
  body text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- Down Migration

DROP TABLE IF EXISTS idempotency_keys;
