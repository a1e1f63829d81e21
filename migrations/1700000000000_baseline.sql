-- Up Migration

-- The schema as first released, each object in its final form; changes go in later migrations.

-- Timestamps leave the database already rendered as the contract's ISO 8601 UTC
-- string with milliseconds, so no per-row Date objects are built in Node.
-- STABLE (to_char is), which lets the planner inline it.
CREATE FUNCTION iso_utc(ts timestamptz) RETURNS text
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

-- Full-text search over posts (docs/api.md §10, `q`): `simple` (words kept as
-- written, lower-cased; no stemming, no stop words) behind `unaccent`, so
-- matching is case- and accent-insensitive and the same in every language.
-- unaccent ships with PostgreSQL and is trusted: the database owner may create it.
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE TEXT SEARCH CONFIGURATION posts_search (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION posts_search
  ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part, numword, numhword, hword_numpart
  WITH unaccent, simple;

-- List totals are kept by the database in the same transaction as the write, so
-- no request ever runs COUNT(*) over a large table. One row per total.
CREATE TABLE counters (
  name text PRIMARY KEY,
  n bigint NOT NULL DEFAULT 0
);

-- A missing row (a seeded or restored database) is created here.
CREATE FUNCTION bump_counter(counter text, delta bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE counters SET n = n + delta WHERE name = counter;
  IF NOT FOUND THEN
    INSERT INTO counters (name, n) VALUES (counter, delta)
      ON CONFLICT (name) DO UPDATE SET n = counters.n + excluded.n;
  END IF;
END $$;

CREATE TABLE users (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  email text NOT NULL,
  name text NOT NULL,
  role text NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
  password_hash text NOT NULL,
  version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- The transaction that created the row: a list page as of a snapshot shows
  -- only rows whose creator it saw committed (attach_snapshots, in the events
  -- migration). Posts need none: their inserts commit in the order of their ids.
  created_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
-- Uniqueness is the database's decision (race-safe); the API maps a violation of
-- this index to 409 with fieldErrors.email.
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
CREATE INDEX users_created_at_id_idx ON users (created_at, id);
CREATE INDEX users_name_id_idx ON users (name, id);

CREATE TABLE tokens (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  -- SHA-256 of the secret: tokens are 256-bit random, so a fast hash is enough
  -- and a stolen table yields no usable credential.
  token_hash bytea NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz,
  created_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX tokens_user_id_id_idx ON tokens (user_id, id);

CREATE TABLE posts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  author_id bigint NOT NULL REFERENCES users (id),
  title text NOT NULL,
  body text NOT NULL,
  version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- Stored, so a search reads the document instead of parsing every body again;
  -- recomputed only when title or body change.
  search tsvector GENERATED ALWAYS AS (to_tsvector('posts_search'::regconfig, title || ' ' || body)) STORED
);
-- One index per allowed order, with and without the author filter; the primary
-- key serves ORDER BY id.
CREATE INDEX posts_created_at_id_idx ON posts (created_at, id);
CREATE INDEX posts_updated_at_id_idx ON posts (updated_at, id);
CREATE INDEX posts_title_id_idx ON posts (title, id);
CREATE INDEX posts_author_id_idx ON posts (author_id, id);
CREATE INDEX posts_author_created_at_id_idx ON posts (author_id, created_at, id);
CREATE INDEX posts_author_updated_at_id_idx ON posts (author_id, updated_at, id);
CREATE INDEX posts_author_title_id_idx ON posts (author_id, title, id);
-- Every search reads the whole pending list of new entries: a small one keeps
-- searches fast, and merging it more often costs inserts little.
CREATE INDEX posts_search_idx ON posts USING gin (search) WITH (gin_pending_list_limit = 256);

-- No index on comments (author_id) alone: the author filter always comes with
-- the post, and users are never deleted.
CREATE TABLE comments (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  post_id bigint NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
  author_id bigint NOT NULL REFERENCES users (id),
  body text NOT NULL,
  version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  created_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX comments_post_id_idx ON comments (post_id, id);
CREATE INDEX comments_post_created_at_id_idx ON comments (post_id, created_at, id);
CREATE INDEX comments_post_author_id_idx ON comments (post_id, author_id, id);
CREATE INDEX comments_post_author_created_at_id_idx ON comments (post_id, author_id, created_at, id);

-- Tombstones keep the sort keys of deleted rows so that a cursor naming a
-- deleted item still marks a position in the list (docs/api.md §5), and an
-- offset page as of a snapshot finds what was deleted since (deleted_xid).
CREATE TABLE deleted_posts (
  id bigint PRIMARY KEY,
  author_id bigint NOT NULL,
  title text NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  deleted_at timestamptz NOT NULL DEFAULT now(),
  deleted_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX deleted_posts_deleted_xid_idx ON deleted_posts (deleted_xid);
CREATE TABLE deleted_comments (
  id bigint PRIMARY KEY,
  post_id bigint NOT NULL,
  author_id bigint NOT NULL,
  created_at timestamptz NOT NULL,
  created_xid xid8 NOT NULL,
  deleted_at timestamptz NOT NULL DEFAULT now(),
  deleted_xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX deleted_comments_deleted_xid_idx ON deleted_comments (deleted_xid);

-- A post's comment total (commentCount); no row until the first comment (read
-- as 0). A table of its own: a comment's bump rewrites this narrow row, which
-- stays in memory, rather than a new version of the whole post (its text and
-- search document, and an entry in each of its indexes when its page is full).
-- fillfactor 80: room on each page for the row's next versions (HOT updates,
-- no new index entry).
CREATE TABLE comment_counts (
  post_id bigint PRIMARY KEY REFERENCES posts (id) ON DELETE CASCADE,
  n bigint NOT NULL
) WITH (fillfactor = 80);

-- A user's post total; no row until the first post (read as 0).
CREATE TABLE author_post_counts (
  author_id bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
  n bigint NOT NULL
);

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
  -- The exact bytes sent, so a replay is identical; NULL once the resource is deleted.
  body text,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- 'post:<id>', 'comment:<id>' or 'user:<id>': what the response described.
  resource text,
  -- For a sign-up, the password's scrypt hash: a retry is told apart without hashing again.
  secret_hash text,
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
CREATE INDEX idempotency_keys_resource_idx ON idempotency_keys (resource) WHERE resource IS NOT NULL;

-- Deleting a resource drops the copies of its content kept for replays
-- (called by its table's delete trigger).
CREATE FUNCTION forget_replays(kind text, ids bigint[]) RETURNS void LANGUAGE sql
BEGIN ATOMIC
  UPDATE idempotency_keys SET body = NULL
   WHERE resource IN (SELECT kind || ':' || i FROM unnest(ids) i) AND body IS NOT NULL;
END;

-- Created up front, so a write is a plain UPDATE.
INSERT INTO counters (name, n) VALUES ('posts', 0), ('users', 0);

-- Each table's triggers (totals, tombstones, forgetting idempotent replays,
-- events) are in migrations/1795800000000_events.sql, one function per table
-- and event, beside the event log they write to.

-- Down Migration

-- Tables take their indexes; forget_replays depends on idempotency_keys.
DROP FUNCTION IF EXISTS forget_replays(text, bigint[]);
DROP TABLE IF EXISTS idempotency_keys, author_post_counts, comment_counts,
  deleted_comments, deleted_posts, comments, posts, tokens, users, counters;
DROP FUNCTION IF EXISTS bump_counter(text, bigint), iso_utc(timestamptz);
DROP TEXT SEARCH CONFIGURATION IF EXISTS posts_search;
DROP EXTENSION IF EXISTS unaccent;
