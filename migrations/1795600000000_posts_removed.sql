-- Up Migration

-- How many times a post has left a list that a proven total depends on: one
-- for every post deleted or moved (its author or creation time changed), and
-- for every edit of a title or body that takes a post out of a registered
-- search (below). It only grows. A capped count that found N matches while it
-- stood at R proves that at least N - (R' - R) still match while it stands at
-- R', since new posts only add matches: a filtered list whose matches are far
-- past the cap (a common word, a busy week) is then known to be capped without
-- counting them again (src/db/pagination.ts, "Proven caps"). Slots by backend
-- pid, as for the totals, so concurrent writers do not queue on one row.
INSERT INTO counters (name, slot, n) SELECT 'posts_removed', s, 0 FROM generate_series(0, 31) s ON CONFLICT DO NOTHING;

-- Searches whose totals may be proven (src/db/search-proofs.ts). Counting
-- every edit of a title or body would cost each edit an UPDATE of a counter
-- row; checking it against these few queries costs a lookup, and the UPDATE
-- only when the edit takes the post out of one. A search counts as proven only
-- once `settled`: set after every transaction that could have edited a post
-- without seeing its row here has ended.
CREATE TABLE search_proofs (
  q text PRIMARY KEY,
  query tsquery NOT NULL,
  settled boolean NOT NULL DEFAULT false
);

-- A DELETE counts its rows once per statement (a row trigger would update the
-- same slot row once per deleted post, which grows quadratically in one
-- transaction). A TRUNCATE removes every post, and a search taken out of
-- search_proofs (or given another query) stops edits counting for it: more
-- removals than any proof covers.
CREATE FUNCTION posts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta bigint := 1;
  removed_slot smallint := pg_backend_pid() % 32;
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
  UPDATE counters SET n = n + delta WHERE name = 'posts_removed' AND slot = removed_slot;
  IF NOT FOUND THEN
    INSERT INTO counters (name, slot, n) VALUES ('posts_removed', removed_slot, delta)
      ON CONFLICT (name, slot) DO UPDATE SET n = counters.n + excluded.n;
  END IF;
  RETURN NULL;
END $$;

-- Only for updates that set these columns: a comment's comment_count update
-- never runs it. (A WHEN comparing old and new values would cost every such
-- update a read of both bodies, which may be compressed or stored apart.)
CREATE TRIGGER posts_edited AFTER UPDATE OF title, body, author_id, created_at ON posts FOR EACH ROW
  EXECUTE FUNCTION posts_removed();
CREATE TRIGGER posts_deleted AFTER DELETE ON posts REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
  EXECUTE FUNCTION posts_removed();
CREATE TRIGGER posts_truncated AFTER TRUNCATE ON posts FOR EACH STATEMENT EXECUTE FUNCTION posts_removed();
CREATE TRIGGER search_proofs_dropped AFTER UPDATE OF query OR DELETE OR TRUNCATE ON search_proofs FOR EACH STATEMENT
  EXECUTE FUNCTION posts_removed();

-- Down Migration

DROP TRIGGER IF EXISTS search_proofs_dropped ON search_proofs;
DROP TRIGGER IF EXISTS posts_truncated ON posts;
DROP TRIGGER IF EXISTS posts_deleted ON posts;
DROP TRIGGER IF EXISTS posts_edited ON posts;
DROP FUNCTION IF EXISTS posts_removed();
DROP TABLE IF EXISTS search_proofs;
DELETE FROM counters WHERE name = 'posts_removed';
