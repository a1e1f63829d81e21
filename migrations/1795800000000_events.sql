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
-- ?post= walks one post's events in id order.
CREATE INDEX events_post_id_id_idx ON events (post_id, id);
-- Retention purges by age, oldest ids first (the id index serves it).

-- Statement-level triggers: one INSERT … SELECT per statement, whatever its
-- row count (a group-committed shared statement writes one event per row).
-- `data` is the public GET representation, built as the repositories' select
-- lists build it. Sessions of other clients (psql, tools) wake the sequencers
-- with a NOTIFY; the service's own sessions do not (a NOTIFY in a writing
-- transaction makes its commit queue on PostgreSQL's notification lock) and
-- wake their instance's sequencer themselves once the write has committed.
CREATE FUNCTION post_event_data(p posts) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', p.id, 'title', p.title, 'body', p.body, 'authorId', p.author_id,
    'commentCount', coalesce((SELECT n FROM comment_counts WHERE post_id = p.id), 0), 'createdAt', iso_utc(p.created_at), 'updatedAt', iso_utc(p.updated_at));

CREATE FUNCTION comment_event_data(c comments) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', c.id, 'postId', c.post_id, 'authorId', c.author_id, 'body', c.body,
    'createdAt', iso_utc(c.created_at), 'updatedAt', iso_utc(c.updated_at));

-- Public fields only: never the e-mail address.
CREATE FUNCTION user_event_data(u users) RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
  RETURN jsonb_build_object('id', u.id, 'name', u.name, 'role', u.role, 'createdAt', iso_utc(u.created_at));

CREATE FUNCTION posts_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      SELECT 'post.created', 'post', n.id, n.id, post_event_data(n) FROM new_rows n ORDER BY n.id;
  ELSE
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      SELECT 'post.deleted', 'post', o.id, o.id, jsonb_build_object('id', o.id) FROM old_rows o ORDER BY o.id;
  END IF;
  IF FOUND THEN
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

-- A row trigger, fired by an UPDATE that sets a column an event shows (UPDATE
-- OF), without capturing transition tables. An UPDATE that changes nothing
-- makes no event. (A comment's count lives in comment_counts: no post update.)
CREATE FUNCTION post_updated_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (OLD.title, OLD.body, OLD.author_id, OLD.created_at, OLD.updated_at, OLD.version)
     IS DISTINCT FROM (NEW.title, NEW.body, NEW.author_id, NEW.created_at, NEW.updated_at, NEW.version) THEN
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      VALUES ('post.updated', 'post', NEW.id, NEW.id, post_event_data(NEW));
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION comments_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      SELECT 'comment.created', 'comment', n.id, n.post_id, comment_event_data(n) FROM new_rows n ORDER BY n.id;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      SELECT 'comment.updated', 'comment', n.id, n.post_id, comment_event_data(n)
      FROM new_rows n JOIN old_rows o ON o.id = n.id
      WHERE o IS DISTINCT FROM n
      ORDER BY n.id;
  ELSE
    INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
      SELECT 'comment.deleted', 'comment', o.id, o.post_id, jsonb_build_object('id', o.id, 'postId', o.post_id)
      FROM old_rows o ORDER BY o.id;
  END IF;
  IF FOUND THEN
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION users_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO events_pending (type, resource_type, resource_id, data)
      SELECT 'user.created', 'user', n.id, user_event_data(n) FROM new_rows n ORDER BY n.id;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO events_pending (type, resource_type, resource_id, data)
      SELECT 'user.updated', 'user', n.id, user_event_data(n)
      FROM new_rows n JOIN old_rows o ON o.id = n.id
      WHERE o IS DISTINCT FROM n
      ORDER BY n.id;
  ELSE
    INSERT INTO events_pending (type, resource_type, resource_id, data)
      SELECT 'user.deleted', 'user', o.id, jsonb_build_object('id', o.id) FROM old_rows o ORDER BY o.id;
  END IF;
  IF FOUND THEN
    PERFORM notify_from_outside('events');
  END IF;
  RETURN NULL;
END $$;

-- A trigger with transition tables serves one event, hence one per event and table.
CREATE TRIGGER posts_events_insert AFTER INSERT ON posts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_events();
CREATE TRIGGER posts_events_update AFTER UPDATE OF title, body, author_id, created_at, updated_at, version ON posts
  FOR EACH ROW EXECUTE FUNCTION post_updated_event();
CREATE TRIGGER posts_events_delete AFTER DELETE ON posts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION posts_events();
CREATE TRIGGER comments_events_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_events();
CREATE TRIGGER comments_events_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_events();
CREATE TRIGGER comments_events_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION comments_events();
CREATE TRIGGER users_events_insert AFTER INSERT ON users REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_events();
CREATE TRIGGER users_events_update AFTER UPDATE ON users REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_events();
CREATE TRIGGER users_events_delete AFTER DELETE ON users REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION users_events();

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

DROP TRIGGER IF EXISTS users_events_delete ON users;
DROP TRIGGER IF EXISTS users_events_update ON users;
DROP TRIGGER IF EXISTS users_events_insert ON users;
DROP TRIGGER IF EXISTS comments_events_delete ON comments;
DROP TRIGGER IF EXISTS comments_events_update ON comments;
DROP TRIGGER IF EXISTS comments_events_insert ON comments;
DROP TRIGGER IF EXISTS posts_events_delete ON posts;
DROP TRIGGER IF EXISTS posts_events_update ON posts;
DROP TRIGGER IF EXISTS posts_events_insert ON posts;
DROP FUNCTION IF EXISTS users_events(), comments_events(), post_updated_event(), posts_events();
DROP FUNCTION IF EXISTS user_event_data(users), comment_event_data(comments), post_event_data(posts);
DROP TABLE IF EXISTS events;
DROP TABLE IF EXISTS events_pending;
