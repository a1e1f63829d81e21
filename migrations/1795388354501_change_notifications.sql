-- Up Migration

-- Every statement that changes posts or comments outside the service (psql, a
-- migration, another tool) notifies the channel the instances' response caches
-- listen on (src/plugins/response-cache.ts). The service's own sessions set
-- posts_api.notifies = after_commit and announce their writes themselves once
-- committed: a NOTIFY in the writing transaction would make every commit wait
-- for PostgreSQL's one notification lock, held through the WAL flush.
-- Statement triggers: one notification per statement, folded within a
-- transaction and delivered when it commits.
CREATE FUNCTION notify_posts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('posts_api.notifies', true) IS DISTINCT FROM 'after_commit' THEN
    PERFORM pg_notify('posts_api_changed', '');
  END IF;
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
