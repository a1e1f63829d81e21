-- Up Migration

-- The event log (docs/api.md §12): an outbox written by the database itself,
-- in the transaction that makes the change, so an event exists if and only if
-- its change committed, whoever made it (the service or SQL run directly).
-- Triggers write events_pending; the sequencer (number_events() below, called
-- by src/events/sequencer.ts) moves committed ones into events with their ids,
-- so ids follow numbering order and a reader following `id > after` never
-- skips one that commits late. Moving (an insert there, a delete here) rather
-- than updating the id in place: an update of an indexed column copies the
-- whole row and every index entry (bench/RESULTS.md, "What the event log
-- costs writes").
CREATE TABLE events_pending (
  seq bigserial,
  tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
  type text NOT NULL,
  resource_type text NOT NULL,
  resource_id bigint NOT NULL,
  post_id bigint,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
-- The sequencer's order: a transaction's events in the order it wrote them.
CREATE INDEX events_pending_tx_seq_idx ON events_pending (tx, seq);

CREATE TABLE events (
  id bigint PRIMARY KEY,
  seq bigint NOT NULL DEFAULT nextval('events_pending_seq_seq'),
  type text NOT NULL,
  resource_type text NOT NULL,
  resource_id bigint NOT NULL,
  post_id bigint,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
-- ?post= walks one post's events in id order; a deleted user's events are found by the second.
-- Retention purges by age, oldest ids first (the id index serves it).
CREATE INDEX events_post_id_id_idx ON events (post_id, id);
CREATE INDEX events_user_idx ON events (resource_id) WHERE resource_type = 'user';

-- `data` is the public GET representation, built as the repositories' select
-- lists build it.
CREATE FUNCTION post_event_data(p posts) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', p.id, 'title', p.title, 'body', p.body, 'authorId', p.author_id,
    'commentCount', coalesce((SELECT n FROM comment_counts WHERE post_id = p.id), 0), 'createdAt', iso_utc(p.created_at), 'updatedAt', iso_utc(p.updated_at));

CREATE FUNCTION comment_event_data(c comments) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', c.id, 'postId', c.post_id, 'authorId', c.author_id, 'body', c.body,
    'createdAt', iso_utc(c.created_at), 'updatedAt', iso_utc(c.updated_at));

-- Public fields only: never the e-mail address or the password hash.
CREATE FUNCTION user_event_data(u users) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', u.id, 'name', u.name, 'role', u.role, 'createdAt', iso_utc(u.created_at));

-- Sessions of other clients (psql, tools) wake the sequencers with a NOTIFY;
-- the service's own sessions (application_name, or the option for tools such
-- as pgbench) do not: a NOTIFY in a writing transaction makes its commit queue
-- on PostgreSQL's notification lock, so they wake their instance's sequencer
-- themselves once the write has committed.
CREATE FUNCTION notify_from_outside(channel text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('posts_api.notifies', true) IS DISTINCT FROM 'after_commit'
     AND current_setting('application_name') <> 'posts-api' THEN
    PERFORM pg_notify(channel, '');
  END IF;
END $$;

-- Each table's behaviour in one place: one trigger function per table and
-- event, run once per statement (a group-committed statement of many rows
-- bumps each total once and writes its events with one INSERT … SELECT), in
-- the writing transaction. A new table copies this shape (docs/architecture.md,
-- "Adding a resource"). Deleting a row also redacts its earlier events to
-- their ids (docs/api.md §12: deleted means gone from the feed too), in
-- events and in events_pending (committed, not yet numbered).

-- Posts: an insert locks its authors' count rows in id order, then the
-- global total, so concurrent inserts never wait for each other in a cycle.
CREATE FUNCTION posts_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
    RETURN NULL;
  END IF;
  INSERT INTO author_post_counts (author_id, n)
    SELECT author_id, count(*) FROM new_rows GROUP BY author_id ORDER BY author_id
    ON CONFLICT (author_id) DO UPDATE SET n = author_post_counts.n + excluded.n;
  PERFORM bump_counter('posts', (SELECT count(*) FROM new_rows));
  INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
    SELECT 'post.created', 'post', n.id, n.id, post_event_data(n) FROM new_rows n ORDER BY n.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

-- A row trigger fired only by an UPDATE that sets a column an event shows
-- (UPDATE OF), without transition tables. An UPDATE that changes nothing makes
-- no event. (A comment's count lives in comment_counts: no post update.)
CREATE FUNCTION posts_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (OLD.title, OLD.body, OLD.author_id, OLD.created_at, OLD.updated_at, OLD.version)
     IS DISTINCT FROM (NEW.title, NEW.body, NEW.author_id, NEW.created_at, NEW.updated_at, NEW.version) THEN
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      VALUES ('post.updated', 'post', NEW.id, NEW.id, post_event_data(NEW));
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

-- Totals, tombstones (a cursor naming a deleted post keeps its place), the
-- copies kept for idempotent replays, the event and the earlier events' content.
CREATE FUNCTION posts_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM old_rows) THEN
    RETURN NULL;
  END IF;
  UPDATE author_post_counts a SET n = a.n - o.n
    FROM (SELECT author_id, count(*) AS n FROM old_rows GROUP BY author_id) o
    WHERE a.author_id = o.author_id;
  PERFORM bump_counter('posts', -(SELECT count(*) FROM old_rows));
  INSERT INTO deleted_posts (id, author_id, title, created_at, updated_at)
    SELECT id, author_id, title, created_at, updated_at FROM old_rows
    ON CONFLICT (id) DO NOTHING;
  PERFORM forget_replays('post', ARRAY(SELECT id FROM old_rows));
  UPDATE events_pending SET data = jsonb_build_object('id', resource_id)
    WHERE resource_type = 'post' AND resource_id IN (SELECT id FROM old_rows);
  UPDATE events SET data = jsonb_build_object('id', resource_id)
    WHERE post_id IN (SELECT id FROM old_rows) AND resource_type = 'post' AND data <> jsonb_build_object('id', resource_id);
  INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
    SELECT 'post.deleted', 'post', o.id, o.id, jsonb_build_object('id', o.id) FROM old_rows o ORDER BY o.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

CREATE TRIGGER posts_after_insert AFTER INSERT ON posts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_after_insert();
CREATE TRIGGER posts_after_update AFTER UPDATE OF title, body, author_id, created_at, updated_at, version ON posts
  FOR EACH ROW EXECUTE FUNCTION posts_after_update();
CREATE TRIGGER posts_after_delete AFTER DELETE ON posts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_after_delete();

-- Comments: commentCount is kept exact by the row lock on its count in the
-- writing transaction. When the post itself is being deleted (cascade) the
-- count's UPDATE finds no row: fine.
CREATE FUNCTION comments_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
    RETURN NULL;
  END IF;
  INSERT INTO comment_counts (post_id, n)
    SELECT post_id, count(*) FROM new_rows GROUP BY post_id ORDER BY post_id
    ON CONFLICT (post_id) DO UPDATE SET n = comment_counts.n + excluded.n;
  INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
    SELECT 'comment.created', 'comment', n.id, n.post_id, comment_event_data(n) FROM new_rows n ORDER BY n.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

CREATE FUNCTION comments_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
    SELECT 'comment.updated', 'comment', n.id, n.post_id, comment_event_data(n)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE o IS DISTINCT FROM n
    ORDER BY n.id;
  IF FOUND THEN
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION comments_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM old_rows) THEN
    RETURN NULL;
  END IF;
  UPDATE comment_counts c SET n = c.n - o.n
    FROM (SELECT post_id, count(*) AS n FROM old_rows GROUP BY post_id ORDER BY post_id) o
    WHERE c.post_id = o.post_id;
  INSERT INTO deleted_comments (id, post_id, author_id, created_at)
    SELECT id, post_id, author_id, created_at FROM old_rows
    ON CONFLICT (id) DO NOTHING;
  PERFORM forget_replays('comment', ARRAY(SELECT id FROM old_rows));
  UPDATE events_pending SET data = jsonb_build_object('id', resource_id, 'postId', post_id)
    WHERE resource_type = 'comment' AND resource_id IN (SELECT id FROM old_rows);
  -- By post first: the (post_id, id) index; one post's events are few.
  UPDATE events SET data = jsonb_build_object('id', resource_id, 'postId', post_id)
    WHERE post_id IN (SELECT DISTINCT post_id FROM old_rows) AND resource_type = 'comment'
      AND resource_id IN (SELECT id FROM old_rows) AND data <> jsonb_build_object('id', resource_id, 'postId', post_id);
  INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
    SELECT 'comment.deleted', 'comment', o.id, o.post_id, jsonb_build_object('id', o.id, 'postId', o.post_id)
    FROM old_rows o ORDER BY o.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

CREATE TRIGGER comments_after_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_after_insert();
CREATE TRIGGER comments_after_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_after_update();
CREATE TRIGGER comments_after_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_after_delete();

-- Users: a change to private fields only (e-mail, password hash) is no event.
CREATE FUNCTION users_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
    RETURN NULL;
  END IF;
  PERFORM bump_counter('users', (SELECT count(*) FROM new_rows));
  INSERT INTO events_pending (type, resource_type, resource_id, data)
    SELECT 'user.created', 'user', n.id, user_event_data(n) FROM new_rows n ORDER BY n.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

CREATE FUNCTION users_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events_pending (type, resource_type, resource_id, data)
    SELECT 'user.updated', 'user', n.id, user_event_data(n)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE user_event_data(o) IS DISTINCT FROM user_event_data(n)
    ORDER BY n.id;
  IF FOUND THEN
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION users_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM old_rows) THEN
    RETURN NULL;
  END IF;
  PERFORM bump_counter('users', -(SELECT count(*) FROM old_rows));
  PERFORM forget_replays('user', ARRAY(SELECT id FROM old_rows));
  UPDATE events_pending SET data = jsonb_build_object('id', resource_id)
    WHERE resource_type = 'user' AND resource_id IN (SELECT id FROM old_rows);
  UPDATE events SET data = jsonb_build_object('id', resource_id)
    WHERE resource_type = 'user' AND resource_id IN (SELECT id FROM old_rows) AND data <> jsonb_build_object('id', resource_id);
  INSERT INTO events_pending (type, resource_type, resource_id, data)
    SELECT 'user.deleted', 'user', o.id, jsonb_build_object('id', o.id) FROM old_rows o ORDER BY o.id;
  PERFORM notify_from_outside('events');
  RETURN NULL;
END $$;

CREATE TRIGGER users_after_insert AFTER INSERT ON users REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_after_insert();
CREATE TRIGGER users_after_update AFTER UPDATE ON users REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_after_update();
CREATE TRIGGER users_after_delete AFTER DELETE ON users REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_after_delete();

-- The sequencer: moves committed events from events_pending into events,
-- numbered on from the largest id, in (tx, seq) order, at most 10 000 per call.
-- A transaction still running has written nothing this call can see, so its
-- events are numbered by a later call, with larger ids: ids follow numbering
-- order, and a reader following `id > after` never finds a smaller id
-- committed behind its cursor. One caller at a time (the advisory lock; a busy
-- lock returns NULL at once, and the caller tries again shortly); each
-- statement below runs on a snapshot taken after the lock, so it sees every
-- earlier caller's ids. Returns how many it numbered, and announces the
-- largest id on 'events_numbered' so that every instance's streams wake.
CREATE FUNCTION number_events() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  numbered integer;
  top bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(27, 1) THEN
    RETURN NULL;
  END IF;
  SELECT coalesce(max(id), 0) INTO top FROM events;
  -- By ctid (a TID scan): the rows a queue leaves dead until vacuum are never read.
  WITH moved AS (
    DELETE FROM events_pending
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM events_pending ORDER BY tx, seq LIMIT 10000))
    RETURNING tx, seq, type, resource_type, resource_id, post_id, data, created_at
  )
  INSERT INTO events (id, seq, type, resource_type, resource_id, post_id, data, created_at)
    SELECT top + row_number() OVER (ORDER BY tx, seq), seq, type, resource_type, resource_id, post_id, data, created_at
    FROM moved ORDER BY tx, seq;
  GET DIAGNOSTICS numbered = ROW_COUNT;
  IF numbered > 0 THEN
    PERFORM pg_notify('events_numbered', (top + numbered)::text);
  END IF;
  RETURN numbered;
END $$;

-- Down Migration

DROP FUNCTION IF EXISTS number_events();

DROP TRIGGER IF EXISTS users_after_delete ON users;
DROP TRIGGER IF EXISTS users_after_update ON users;
DROP TRIGGER IF EXISTS users_after_insert ON users;
DROP TRIGGER IF EXISTS comments_after_delete ON comments;
DROP TRIGGER IF EXISTS comments_after_update ON comments;
DROP TRIGGER IF EXISTS comments_after_insert ON comments;
DROP TRIGGER IF EXISTS posts_after_delete ON posts;
DROP TRIGGER IF EXISTS posts_after_update ON posts;
DROP TRIGGER IF EXISTS posts_after_insert ON posts;
DROP FUNCTION IF EXISTS users_after_delete(), users_after_update(), users_after_insert(),
  comments_after_delete(), comments_after_update(), comments_after_insert(),
  posts_after_delete(), posts_after_update(), posts_after_insert(), notify_from_outside(text),
  user_event_data(users), comment_event_data(comments), post_event_data(posts);
DROP TABLE IF EXISTS events;
DROP TABLE IF EXISTS events_pending;
