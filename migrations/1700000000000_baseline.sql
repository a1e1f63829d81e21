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
  updated_at timestamptz NOT NULL DEFAULT now()
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
  revoked_at timestamptz
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
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX comments_post_id_idx ON comments (post_id, id);
CREATE INDEX comments_post_created_at_id_idx ON comments (post_id, created_at, id);
CREATE INDEX comments_post_author_id_idx ON comments (post_id, author_id, id);
CREATE INDEX comments_post_author_created_at_id_idx ON comments (post_id, author_id, created_at, id);

-- Tombstones keep the sort keys of deleted rows so that a cursor naming a
-- deleted item still marks a position in the list (docs/api.md §5).
CREATE TABLE deleted_posts (
  id bigint PRIMARY KEY,
  author_id bigint NOT NULL,
  title text NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE deleted_comments (
  id bigint PRIMARY KEY,
  post_id bigint NOT NULL,
  author_id bigint NOT NULL,
  created_at timestamptz NOT NULL,
  deleted_at timestamptz NOT NULL DEFAULT now()
);

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

-- Searches whose totals may be proven (src/db/search-proofs.ts, "Proven caps"
-- in docs/architecture.md). A search counts as proven only once `settled`: set
-- after every transaction that could have edited a post without seeing its row
-- here has ended.
CREATE TABLE search_proofs (
  q text PRIMARY KEY,
  query tsquery NOT NULL,
  settled boolean NOT NULL DEFAULT false
);

-- A lower bound on the ids of the posts created in each hour (counted from the
-- epoch, which no session's time zone changes), so that a date range listed in
-- id order starts its walk of the primary key where its posts do
-- (src/repositories/posts.ts, idBound). Deleted posts only make it looser; an
-- hour with no row has no posts.
CREATE FUNCTION post_hour(ts timestamptz) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN floor(extract(epoch FROM ts) / 3600)::bigint;

CREATE TABLE post_floors (
  hour bigint PRIMARY KEY,
  min_id bigint NOT NULL
);

-- Nearly every insert finds its hour's row already at or below its id (ids
-- grow): one index lookup, no write, so new posts of one hour do not queue.
CREATE FUNCTION floor_post(post bigint, created timestamptz) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  h bigint := post_hour(created);
BEGIN
  IF NOT EXISTS (SELECT 1 FROM post_floors WHERE hour = h AND min_id <= post) THEN
    INSERT INTO post_floors (hour, min_id) VALUES (h, post)
      ON CONFLICT (hour) DO UPDATE SET min_id = excluded.min_id WHERE post_floors.min_id > excluded.min_id;
  END IF;
END $$;

-- Created up front, so a write is a plain UPDATE.
INSERT INTO counters (name, n) VALUES ('posts', 0), ('posts_removed', 0), ('users', 0);

CREATE FUNCTION users_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bump_counter('users', CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END);
  RETURN NULL;
END $$;
CREATE TRIGGER users_count AFTER INSERT OR DELETE ON users
  FOR EACH ROW EXECUTE FUNCTION users_count();

-- The post totals, the tombstones of deleted posts and the hour floors of new
-- ones, once per statement: a group-committed insert of many posts bumps each
-- total once. An insert locks its authors' rows in id order, then the global
-- total, so concurrent inserts never wait for each other in a cycle.
CREATE FUNCTION posts_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT count(*) INTO delta FROM new_rows;
    INSERT INTO author_post_counts (author_id, n)
      SELECT author_id, count(*) FROM new_rows GROUP BY author_id ORDER BY author_id
      ON CONFLICT (author_id) DO UPDATE SET n = author_post_counts.n + excluded.n;
    -- Nearly every insert finds its hour's floor already at or below its ids: no write.
    INSERT INTO post_floors (hour, min_id)
      SELECT f.hour, f.min_id FROM (SELECT post_hour(created_at) AS hour, min(id) AS min_id FROM new_rows GROUP BY 1) f
      WHERE NOT EXISTS (SELECT 1 FROM post_floors p WHERE p.hour = f.hour AND p.min_id <= f.min_id)
      ORDER BY f.hour
      ON CONFLICT (hour) DO UPDATE SET min_id = excluded.min_id WHERE post_floors.min_id > excluded.min_id;
  ELSE
    SELECT -count(*) INTO delta FROM old_rows;
    UPDATE author_post_counts a SET n = a.n - o.n
      FROM (SELECT author_id, count(*) AS n FROM old_rows GROUP BY author_id) o
      WHERE a.author_id = o.author_id;
    INSERT INTO deleted_posts (id, author_id, title, created_at, updated_at)
      SELECT id, author_id, title, created_at, updated_at FROM old_rows
      ON CONFLICT (id) DO NOTHING;
  END IF;
  IF delta <> 0 THEN
    PERFORM bump_counter('posts', delta);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER posts_count_insert AFTER INSERT ON posts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_count();
CREATE TRIGGER posts_count_delete AFTER DELETE ON posts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_count();

-- commentCount is kept exact by the row lock on the count in the writing
-- transaction. When the post itself is being deleted (cascade) the UPDATE
-- finds no row: fine.
CREATE FUNCTION comments_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO comment_counts (post_id, n) VALUES (NEW.post_id, 1)
      ON CONFLICT (post_id) DO UPDATE SET n = comment_counts.n + 1;
  ELSE
    UPDATE comment_counts SET n = n - 1 WHERE post_id = OLD.post_id;
    INSERT INTO deleted_comments (id, post_id, author_id, created_at)
      VALUES (OLD.id, OLD.post_id, OLD.author_id, OLD.created_at)
      ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER comments_count AFTER INSERT OR DELETE ON comments
  FOR EACH ROW EXECUTE FUNCTION comments_count();

-- Statements changing posts or comments outside the service (psql, other tools)
-- notify the response caches' channel (src/cache/change-bus.ts), once per
-- statement, at commit. The service's sessions announce their writes after commit
-- (a NOTIFY in the writing transaction makes every commit wait for one global
-- lock); application_name says so even behind PgBouncer in transaction mode.
CREATE FUNCTION notify_from_outside(channel text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('posts_api.notifies', true) IS DISTINCT FROM 'after_commit'
     AND current_setting('application_name') <> 'posts-api' THEN
    PERFORM pg_notify(channel, '');
  END IF;
END $$;
CREATE FUNCTION notify_posts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM notify_from_outside('posts_api_changed');
  RETURN NULL;
END $$;
CREATE TRIGGER posts_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON posts
  FOR EACH STATEMENT EXECUTE FUNCTION notify_posts_changed();
CREATE TRIGGER comments_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON comments
  FOR EACH STATEMENT EXECUTE FUNCTION notify_posts_changed();

-- Deleting a post or comment drops the copy of its content kept for replays;
-- statement triggers: one UPDATE per DELETE, also for cascaded comments.
CREATE FUNCTION forget_idempotent_responses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE idempotency_keys SET body = NULL
   WHERE resource IN (SELECT TG_ARGV[0] || ':' || gone.id FROM gone) AND body IS NOT NULL;
  RETURN NULL;
END $$;
CREATE TRIGGER posts_forget_idempotent AFTER DELETE ON posts REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION forget_idempotent_responses('post');
CREATE TRIGGER comments_forget_idempotent AFTER DELETE ON comments REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION forget_idempotent_responses('comment');

-- Counts in counters 'posts_removed' each post leaving a list a proven total
-- rests on: deleted, moved (author or created_at changed), or edited out of a
-- search in search_proofs. A TRUNCATE, or a search taken out of search_proofs,
-- counts more than any proof covers. A DELETE counts once per statement.
CREATE FUNCTION posts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta bigint := 1;
BEGIN
  IF TG_OP = 'TRUNCATE' OR TG_TABLE_NAME = 'search_proofs' THEN
    delta := 1000000000;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT count(*) INTO delta FROM gone;
    IF delta = 0 THEN
      RETURN NULL;
    END IF;
  ELSIF OLD.author_id = NEW.author_id AND OLD.created_at = NEW.created_at
     AND NOT EXISTS (SELECT 1 FROM search_proofs p WHERE OLD.search @@ p.query AND NOT NEW.search @@ p.query) THEN
    RETURN NULL;
  END IF;
  PERFORM bump_counter('posts_removed', delta);
  RETURN NULL;
END $$;
-- UPDATE OF: an update of other columns never runs it. (A WHEN comparing
-- old and new values would read both bodies, which may be compressed or stored apart.)
CREATE TRIGGER posts_edited AFTER UPDATE OF title, body, author_id, created_at ON posts FOR EACH ROW
  EXECUTE FUNCTION posts_removed();
CREATE TRIGGER posts_deleted AFTER DELETE ON posts REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
  EXECUTE FUNCTION posts_removed();
CREATE TRIGGER posts_truncated AFTER TRUNCATE ON posts FOR EACH STATEMENT EXECUTE FUNCTION posts_removed();
CREATE TRIGGER search_proofs_dropped AFTER UPDATE OF query OR DELETE OR TRUNCATE ON search_proofs FOR EACH STATEMENT
  EXECUTE FUNCTION posts_removed();

-- A post moved to another hour keeps a floor there (the API never sets created_at).
CREATE FUNCTION posts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM floor_post(NEW.id, NEW.created_at);
  RETURN NULL;
END $$;
CREATE TRIGGER posts_moved AFTER UPDATE OF created_at ON posts FOR EACH ROW
  WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at) EXECUTE FUNCTION posts_moved();

-- Down Migration

-- Tables take their triggers and indexes.
DROP TABLE IF EXISTS post_floors, search_proofs, idempotency_keys, author_post_counts, comment_counts,
  deleted_comments, deleted_posts, comments, posts, tokens, users, counters;
DROP FUNCTION IF EXISTS posts_moved(), posts_removed(), forget_idempotent_responses(), notify_posts_changed(),
  notify_from_outside(text),
  comments_count(), posts_count(), users_count(), floor_post(bigint, timestamptz), post_hour(timestamptz),
  bump_counter(text, bigint), iso_utc(timestamptz);
DROP TEXT SEARCH CONFIGURATION IF EXISTS posts_search;
DROP EXTENSION IF EXISTS unaccent;
