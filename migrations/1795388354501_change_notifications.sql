-- Up Migration

-- Every statement that changes posts or comments notifies the channel the
-- instances' response caches listen on (src/plugins/response-cache.ts), so a
-- write through any instance, a migration or psql empties them all. Statement
-- triggers: one notification per statement, and PostgreSQL folds identical
-- ones within a transaction and delivers them only when it commits.
CREATE FUNCTION notify_posts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('posts_api_changed', '');
  RETURN NULL;
END $$;

CREATE TRIGGER posts_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON posts
  FOR EACH STATEMENT EXECUTE FUNCTION notify_posts_changed();
CREATE TRIGGER comments_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON comments
  FOR EACH STATEMENT EXECUTE FUNCTION notify_posts_changed();

-- Down Migration

DROP TRIGGER IF EXISTS comments_changed ON comments;
DROP TRIGGER IF EXISTS posts_changed ON posts;
DROP FUNCTION IF EXISTS notify_posts_changed();
