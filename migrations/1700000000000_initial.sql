-- Up Migration

-- Timestamps leave the database already rendered as the contract's ISO 8601 UTC
-- string with milliseconds, so no per-row Date objects are built in Node.
CREATE FUNCTION iso_utc(ts timestamptz) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

-- List totals are kept by the database in the same transaction as the write, so
-- no request ever runs COUNT(*) over a large table. A global total is spread over
-- 16 slots (chosen by backend pid) so concurrent inserts do not queue on one row.
CREATE TABLE counters (
  name text NOT NULL,
  slot smallint NOT NULL,
  n bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, slot)
);

CREATE FUNCTION bump_counter(counter text, delta bigint) RETURNS void
  LANGUAGE sql
  BEGIN ATOMIC
    INSERT INTO counters (name, slot, n) VALUES (counter, pg_backend_pid() % 16, delta)
    ON CONFLICT (name, slot) DO UPDATE SET n = counters.n + excluded.n;
  END;

CREATE TABLE users (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  email text NOT NULL,
  name text NOT NULL,
  role text NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
  password_hash text NOT NULL,
  post_count bigint NOT NULL DEFAULT 0,
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
  comment_count bigint NOT NULL DEFAULT 0,
  version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
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
CREATE INDEX comments_author_id_idx ON comments (author_id);

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

CREATE FUNCTION users_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bump_counter('users', CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END);
  RETURN NULL;
END $$;
CREATE TRIGGER users_count AFTER INSERT OR DELETE ON users
  FOR EACH ROW EXECUTE FUNCTION users_count();

CREATE FUNCTION posts_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM bump_counter('posts', 1);
    UPDATE users SET post_count = post_count + 1 WHERE id = NEW.author_id;
  ELSE
    PERFORM bump_counter('posts', -1);
    UPDATE users SET post_count = post_count - 1 WHERE id = OLD.author_id;
    INSERT INTO deleted_posts (id, author_id, title, created_at, updated_at)
      VALUES (OLD.id, OLD.author_id, OLD.title, OLD.created_at, OLD.updated_at)
      ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER posts_count AFTER INSERT OR DELETE ON posts
  FOR EACH ROW EXECUTE FUNCTION posts_count();

-- commentCount is kept exact by row-locking the post in the writing transaction.
-- When the post itself is being deleted (cascade) the UPDATE finds no row: fine.
CREATE FUNCTION comments_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE posts SET comment_count = comment_count + 1 WHERE id = NEW.post_id;
  ELSE
    UPDATE posts SET comment_count = comment_count - 1 WHERE id = OLD.post_id;
    INSERT INTO deleted_comments (id, post_id, author_id, created_at)
      VALUES (OLD.id, OLD.post_id, OLD.author_id, OLD.created_at)
      ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER comments_count AFTER INSERT OR DELETE ON comments
  FOR EACH ROW EXECUTE FUNCTION comments_count();

-- Down Migration

DROP TABLE IF EXISTS deleted_comments, deleted_posts, comments, posts, tokens, users, counters;
DROP FUNCTION IF EXISTS comments_count(), posts_count(), users_count(), bump_counter(text, bigint), iso_utc(timestamptz);
