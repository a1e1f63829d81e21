-- Up Migration

-- How many times a post has left the lists it was in: one for every post
-- deleted, and one for every post whose title, body, author or creation time
-- changed (a search, an author's list or a date range may no longer select
-- it). It only grows. A capped count that found N matches while it stood at R
-- proves that at least N - (R' - R) still match while it stands at R', since
-- new posts only add matches: a filtered list whose matches are far past the
-- cap (a common word, a busy week) is then known to be capped without
-- counting them again (src/db/pagination.ts, "Proven caps"). Slots by backend
-- pid, as for the totals, so concurrent writers do not queue on one row.
INSERT INTO counters (name, slot, n) SELECT 'posts_removed', s, 0 FROM generate_series(0, 31) s ON CONFLICT DO NOTHING;

CREATE FUNCTION bump_posts_removed(delta bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  removed_slot smallint := pg_backend_pid() % 32;
BEGIN
  UPDATE counters SET n = n + delta WHERE name = 'posts_removed' AND slot = removed_slot;
  IF NOT FOUND THEN
    INSERT INTO counters (name, slot, n) VALUES ('posts_removed', removed_slot, delta)
      ON CONFLICT (name, slot) DO UPDATE SET n = counters.n + excluded.n;
  END IF;
END $$;

-- A TRUNCATE removes every post: more removals than any proof covers.
CREATE FUNCTION posts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bump_posts_removed(CASE TG_OP WHEN 'TRUNCATE' THEN 1000000000 ELSE 1 END);
  RETURN NULL;
END $$;

-- WHEN keeps the function out of every other update (a comment's comment_count, an edit of nothing that narrows).
CREATE TRIGGER posts_edited AFTER UPDATE ON posts FOR EACH ROW
  WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.body IS DISTINCT FROM NEW.body
        OR OLD.author_id IS DISTINCT FROM NEW.author_id OR OLD.created_at IS DISTINCT FROM NEW.created_at)
  EXECUTE FUNCTION posts_removed();
CREATE TRIGGER posts_truncated AFTER TRUNCATE ON posts FOR EACH STATEMENT EXECUTE FUNCTION posts_removed();

-- A delete already runs posts_count, which counts it there (one trigger call instead of two).
CREATE OR REPLACE FUNCTION posts_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta int := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
  author bigint := CASE TG_OP WHEN 'INSERT' THEN NEW.author_id ELSE OLD.author_id END;
  total_slot smallint := pg_backend_pid() % 32;
  author_slot smallint := pg_backend_pid() % 16;
BEGIN
  UPDATE counters SET n = n + delta WHERE name = 'posts' AND slot = total_slot;
  IF NOT FOUND THEN
    INSERT INTO counters (name, slot, n) VALUES ('posts', total_slot, delta)
      ON CONFLICT (name, slot) DO UPDATE SET n = counters.n + excluded.n;
  END IF;
  UPDATE author_post_counts SET n = n + delta WHERE author_id = author AND slot = author_slot;
  IF NOT FOUND THEN
    INSERT INTO author_post_counts (author_id, slot, n) VALUES (author, author_slot, delta)
      ON CONFLICT (author_id, slot) DO UPDATE SET n = author_post_counts.n + excluded.n;
  END IF;
  IF TG_OP = 'DELETE' THEN
    PERFORM bump_posts_removed(1);
    INSERT INTO deleted_posts (id, author_id, title, created_at, updated_at)
      VALUES (OLD.id, OLD.author_id, OLD.title, OLD.created_at, OLD.updated_at)
      ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;

-- Down Migration

CREATE OR REPLACE FUNCTION posts_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta int := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
  author bigint := CASE TG_OP WHEN 'INSERT' THEN NEW.author_id ELSE OLD.author_id END;
  total_slot smallint := pg_backend_pid() % 32;
  author_slot smallint := pg_backend_pid() % 16;
BEGIN
  UPDATE counters SET n = n + delta WHERE name = 'posts' AND slot = total_slot;
  IF NOT FOUND THEN
    INSERT INTO counters (name, slot, n) VALUES ('posts', total_slot, delta)
      ON CONFLICT (name, slot) DO UPDATE SET n = counters.n + excluded.n;
  END IF;
  UPDATE author_post_counts SET n = n + delta WHERE author_id = author AND slot = author_slot;
  IF NOT FOUND THEN
    INSERT INTO author_post_counts (author_id, slot, n) VALUES (author, author_slot, delta)
      ON CONFLICT (author_id, slot) DO UPDATE SET n = author_post_counts.n + excluded.n;
  END IF;
  IF TG_OP = 'DELETE' THEN
    INSERT INTO deleted_posts (id, author_id, title, created_at, updated_at)
      VALUES (OLD.id, OLD.author_id, OLD.title, OLD.created_at, OLD.updated_at)
      ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS posts_truncated ON posts;
DROP TRIGGER IF EXISTS posts_edited ON posts;
DROP FUNCTION IF EXISTS posts_removed();
DROP FUNCTION IF EXISTS bump_posts_removed(bigint);
DELETE FROM counters WHERE name = 'posts_removed';
