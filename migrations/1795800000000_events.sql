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
-- ?post= walks one post's events in id order (and a deleted comment's are found by it);
-- attach_resource gives a resource not under a post an index of its own.
-- Retention purges by age, oldest ids first (the id index serves it).
CREATE INDEX events_post_id_id_idx ON events (post_id, id);

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

-- A resource's standard behaviour, attached rather than copied: one call of
-- attach_resource() in a resource's migration gives its table the triggers
-- that write its events (docs/api.md §12), redact a deleted row's earlier
-- events (in events and in events_pending: committed, not yet numbered),
-- forget the responses kept for idempotent replays, keep the tombstones that
-- let a cursor name a deleted row, and wake the sequencers. The generated
-- functions hold plain SQL (plans cached per session, as hand-written ones
-- would be); the only text a table adds is how it keeps its own totals.
--
--   resource     the singular name: events' resource_type, replays' kind;
--                <resource>_event_data(<table>) builds an event's data
--   post_column  the column holding the row's post (posts: id; a resource
--                under a post: post_id; NULL for one that is not)
--   tombstones   the table keeping deleted rows' sort keys: every column of
--                it but deleted_at is copied from the deleted row
--   on_insert, on_delete   statements keeping the table's list totals, run
--                first (before the events), reading new_rows / old_rows
--   shown        the columns <resource>_event_data reads, if the table is
--                written often: see below
--
-- Inserts and deletes fire once per statement (a group-committed statement of
-- many rows bumps each total once and writes its events with one INSERT …
-- SELECT); an update fires per changed row, and makes an event only when the
-- data a GET shows changed (a PATCH with equal values, or a change to private
-- fields such as a password, makes none). Without `shown` that is decided by
-- building the data of the old row too; with it, PostgreSQL compares those
-- columns before calling the trigger (UPDATE OF … WHEN), which the posts'
-- edits needed (bench/RESULTS.md, "Attached triggers").
CREATE FUNCTION attach_resource(tbl regclass, resource text, post_column text DEFAULT NULL,
  tombstones regclass DEFAULT NULL, on_insert text DEFAULT '', on_delete text DEFAULT '',
  shown text[] DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $attach$
DECLARE
  name text := (SELECT relname FROM pg_class WHERE oid = tbl);
  data_of text := quote_ident(resource || '_event_data');
  post_of_new text := coalesce('n.' || quote_ident(post_column), 'NULL');
  post_of_old text := coalesce('o.' || quote_ident(post_column), 'NULL');
  under_post boolean := post_column IS NOT NULL AND post_column <> 'id';
  -- A deleted row's data, from the row itself and from its events' columns.
  gone_row text := CASE WHEN under_post THEN format('jsonb_build_object(''id'', o.id, ''postId'', o.%I)', post_column)
    ELSE 'jsonb_build_object(''id'', o.id)' END;
  gone_event text := CASE WHEN under_post THEN 'jsonb_build_object(''id'', resource_id, ''postId'', post_id)'
    ELSE 'jsonb_build_object(''id'', resource_id)' END;
  -- Which index finds its earlier events: (post_id, id), or one of its own.
  earlier text := CASE WHEN post_column IS NULL THEN ''
    ELSE format('post_id IN (SELECT DISTINCT o.%I FROM old_rows o) AND ', post_column) END;
  kept text := '';
  -- Which updates call the trigger, and what it still has to check.
  fires text := 'AFTER UPDATE ON %2$s FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)';
  changed text := format('item IS DISTINCT FROM %s(OLD)', quote_ident(resource || '_event_data'));
BEGIN
  IF shown IS NOT NULL THEN
    SELECT format('AFTER UPDATE OF %s ON %%2$s FOR EACH ROW WHEN ((%s) IS DISTINCT FROM (%s))',
        string_agg(quote_ident(c), ', '), string_agg('OLD.' || quote_ident(c), ', '),
        string_agg('NEW.' || quote_ident(c), ', '))
      INTO fires FROM unnest(shown) c;
    changed := 'true';
  END IF;
  IF post_column IS NULL THEN
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON events (resource_id) WHERE resource_type = %L',
      'events_' || resource || '_idx', resource);
  END IF;
  IF tombstones IS NOT NULL THEN
    SELECT format('INSERT INTO %s (%2$s) SELECT %2$s FROM old_rows ON CONFLICT (id) DO NOTHING;', tombstones,
        string_agg(quote_ident(attname), ', ' ORDER BY attnum))
      INTO kept FROM pg_attribute
      WHERE attrelid = tombstones AND attnum > 0 AND NOT attisdropped AND attname <> 'deleted_at';
  END IF;

  EXECUTE format($f$
    CREATE FUNCTION %1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
        RETURN NULL;
      END IF;
      %2$s
      INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
        SELECT %3$L, %4$L, n.id, %5$s, %6$s(n) FROM new_rows n ORDER BY n.id;
      PERFORM notify_from_outside('events');
      RETURN NULL;
    END $body$$f$,
    name || '_after_insert', on_insert, resource || '.created', resource, post_of_new, data_of);

  EXECUTE format($f$
    CREATE FUNCTION %1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
    DECLARE
      item jsonb := %2$s(NEW);
    BEGIN
      IF %6$s THEN
        INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
          VALUES (%3$L, %4$L, NEW.id, %5$s, item);
        PERFORM notify_from_outside('events');
      END IF;
      RETURN NULL;
    END $body$$f$,
    name || '_after_update', data_of, resource || '.updated', resource,
    coalesce('NEW.' || quote_ident(post_column), 'NULL'), changed);

  EXECUTE format($f$
    CREATE FUNCTION %1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM old_rows) THEN
        RETURN NULL;
      END IF;
      %2$s
      %3$s
      PERFORM forget_replays(%4$L, ARRAY(SELECT id FROM old_rows));
      UPDATE events_pending SET data = %5$s
        WHERE resource_type = %4$L AND resource_id IN (SELECT id FROM old_rows);
      UPDATE events SET data = %5$s
        WHERE %6$s resource_type = %4$L AND resource_id IN (SELECT id FROM old_rows) AND data <> %5$s;
      INSERT INTO events_pending (type, resource_type, resource_id, post_id, data)
        SELECT %7$L, %4$L, o.id, %8$s, %9$s FROM old_rows o ORDER BY o.id;
      PERFORM notify_from_outside('events');
      RETURN NULL;
    END $body$$f$,
    name || '_after_delete', on_delete, kept, resource, gone_event, earlier, resource || '.deleted',
    post_of_old, gone_row);

  EXECUTE format('CREATE TRIGGER %1$I AFTER INSERT ON %2$s REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %1$I()', name || '_after_insert', tbl);
  EXECUTE format('CREATE TRIGGER %1$I ' || fires || ' EXECUTE FUNCTION %1$I()', name || '_after_update', tbl);
  EXECUTE format('CREATE TRIGGER %1$I AFTER DELETE ON %2$s REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION %1$I()', name || '_after_delete', tbl);
END $attach$;

-- What a resource's Down calls: its triggers go with their functions.
CREATE FUNCTION detach_resource(tbl regclass, resource text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  name text := (SELECT relname FROM pg_class WHERE oid = tbl);
BEGIN
  EXECUTE format('DROP FUNCTION IF EXISTS %I() CASCADE', name || '_after_insert');
  EXECUTE format('DROP FUNCTION IF EXISTS %I() CASCADE', name || '_after_update');
  EXECUTE format('DROP FUNCTION IF EXISTS %I() CASCADE', name || '_after_delete');
  EXECUTE format('DROP INDEX IF EXISTS %I', 'events_' || resource || '_idx');
END $$;

-- Posts: an insert locks its authors' count rows in id order, then the global
-- total, so concurrent inserts never wait for each other in a cycle.
SELECT attach_resource('posts', 'post', post_column => 'id', tombstones => 'deleted_posts',
  shown => ARRAY['title', 'body', 'author_id', 'created_at', 'updated_at'],
  on_insert => $$
    INSERT INTO author_post_counts (author_id, n)
      SELECT author_id, count(*) FROM new_rows GROUP BY author_id ORDER BY author_id
      ON CONFLICT (author_id) DO UPDATE SET n = author_post_counts.n + excluded.n;
    PERFORM bump_counter('posts', (SELECT count(*) FROM new_rows));$$,
  on_delete => $$
    UPDATE author_post_counts a SET n = a.n - o.n
      FROM (SELECT author_id, count(*) AS n FROM old_rows GROUP BY author_id) o
      WHERE a.author_id = o.author_id;
    PERFORM bump_counter('posts', -(SELECT count(*) FROM old_rows));$$);

-- Comments: commentCount is kept exact by the row lock on its count in the
-- writing transaction. When the post itself is being deleted (cascade) the
-- count's UPDATE finds no row: fine.
SELECT attach_resource('comments', 'comment', post_column => 'post_id', tombstones => 'deleted_comments',
  shown => ARRAY['post_id', 'author_id', 'body', 'created_at', 'updated_at'],
  on_insert => $$
    INSERT INTO comment_counts (post_id, n)
      SELECT post_id, count(*) FROM new_rows GROUP BY post_id ORDER BY post_id
      ON CONFLICT (post_id) DO UPDATE SET n = comment_counts.n + excluded.n;$$,
  on_delete => $$
    UPDATE comment_counts c SET n = c.n - o.n
      FROM (SELECT post_id, count(*) AS n FROM old_rows GROUP BY post_id ORDER BY post_id) o
      WHERE c.post_id = o.post_id;$$);

-- Users: a change to private fields only (e-mail, password hash) is no event,
-- as user_event_data shows neither.
SELECT attach_resource('users', 'user', shown => ARRAY['name', 'role', 'created_at'],
  on_insert => $$PERFORM bump_counter('users', (SELECT count(*) FROM new_rows));$$,
  on_delete => $$PERFORM bump_counter('users', -(SELECT count(*) FROM old_rows));$$);

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

SELECT detach_resource('users', 'user'), detach_resource('comments', 'comment'), detach_resource('posts', 'post');
DROP FUNCTION IF EXISTS detach_resource(regclass, text), attach_resource(regclass, text, text, regclass, text, text, text[]),
  notify_from_outside(text), user_event_data(users), comment_event_data(comments), post_event_data(posts);
DROP TABLE IF EXISTS events;
DROP TABLE IF EXISTS events_pending;
