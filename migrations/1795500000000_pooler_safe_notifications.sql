-- Up Migration

-- The service's sessions say they announce their own changes after commit
-- (see 1795388354501_change_notifications.sql) by their application_name too:
-- behind PgBouncer in transaction mode a session-level option set at connect
-- time never reaches the server connection that runs the statement, while
-- application_name does (PgBouncer sets it on every connection it lends).
CREATE OR REPLACE FUNCTION notify_posts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('posts_api.notifies', true) IS DISTINCT FROM 'after_commit'
     AND current_setting('application_name') <> 'posts-api' THEN
    PERFORM pg_notify('posts_api_changed', '');
  END IF;
  RETURN NULL;
END $$;

-- Down Migration

CREATE OR REPLACE FUNCTION notify_posts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('posts_api.notifies', true) IS DISTINCT FROM 'after_commit' THEN
    PERFORM pg_notify('posts_api_changed', '');
  END IF;
  RETURN NULL;
END $$;
