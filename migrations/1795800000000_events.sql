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

-- Offset pages as of a moment (docs/api.md §5, `snapshot`). A page without a
-- snapshot hands one out: its statement's pg_current_snapshot() and the
-- largest id it saw (`top`). A later page shows only the rows that snapshot
-- saw, and merges in the tombstones of those deleted since (deleted_xid not in
-- the snapshot), which it counts but does not show, so nothing after them
-- moves (src/db/pagination/offset.ts). Which rows it saw, a table says one of
-- two ways:
-- - by created_xid, the creating transaction, checked against the snapshot
--   row by row (pg_visible_in_snapshot): exact, and read from the heap, which
--   short lists (one post's comments, one user's tokens) can afford;
-- - `in_id_order`: the rows up to `top`, read from an index alone, which deep
--   pages of big lists need (posts). That is exact because the table's
--   inserts commit in the order of their ids: each insert statement takes the
--   table's lock (commit_in_id_order) before its first row takes an id, and
--   keeps it to its commit. Without it, an insert could take id 5, another id 6
--   and commit first, and a snapshot then would have top 6 without row 5, which
--   commits later. The lock costs little where inserts already queue (posts
--   take the `counters` row in the same transaction); a statement waiting on
--   another lock while holding it holds back the table's other inserts.
CREATE FUNCTION commit_in_id_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock((28::int8 << 32) | TG_RELID::int8);
  RETURN NULL;
END $$;

-- The columns are declared with the table (a function taking its row type
-- keeps ALTER TABLE from adding them here): created_xid xid8 NOT NULL DEFAULT
-- pg_current_xact_id() unless in_id_order, and on its tombstones deleted_xid
-- xid8 NOT NULL DEFAULT pg_current_xact_id(), indexed (and created_xid).
CREATE FUNCTION attach_snapshots(tbl regclass, tombstones regclass DEFAULT NULL, in_id_order boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $attach$
DECLARE
  needed text[] := CASE WHEN in_id_order THEN ARRAY[]::text[] ELSE ARRAY['created_xid'] END;
BEGIN
  IF EXISTS (SELECT FROM unnest(needed) c WHERE NOT EXISTS (SELECT FROM pg_attribute
      WHERE attrelid = tbl AND attname = c AND NOT attisdropped))
     OR (tombstones IS NOT NULL AND EXISTS (SELECT FROM unnest(needed || 'deleted_xid'::text) c
       WHERE NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = tombstones AND attname = c AND NOT attisdropped))) THEN
    RAISE EXCEPTION '% needs the columns of attach_snapshots (created_xid, and deleted_xid on its tombstones)', tbl;
  END IF;
  IF in_id_order THEN
    EXECUTE format('CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH STATEMENT EXECUTE FUNCTION commit_in_id_order()',
      (SELECT relname FROM pg_class WHERE oid = tbl) || '_before_insert', tbl);
  END IF;
END $attach$;

CREATE FUNCTION detach_snapshots(tbl regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', (SELECT relname FROM pg_class WHERE oid = tbl) || '_before_insert', tbl);
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
--   tombstones   the table keeping deleted rows' sort keys: its columns that
--                the table has too are copied from the deleted row
--   on_insert, on_delete   statements keeping the table's list totals, run
--                first (before the events), reading new_rows / old_rows
--   shown        the columns <resource>_event_data reads, if the table is
--                written often: see below
--   in_id_order  how its list pages as of a snapshot tell the rows it saw
--                (attach_snapshots, above)
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
  shown text[] DEFAULT NULL, in_id_order boolean DEFAULT false)
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
    -- An id deleted before (SQL may insert a row with a used id) is a new tombstone: its keys, its deletion.
    SELECT format('INSERT INTO %s (%2$s) SELECT %2$s FROM old_rows ON CONFLICT (id) DO UPDATE SET (%3$s) = ROW(%4$s);',
        tombstones,
        string_agg(quote_ident(attname), ', ' ORDER BY attnum) FILTER (WHERE copied),
        string_agg(quote_ident(attname), ', ' ORDER BY attnum) FILTER (WHERE attname <> 'id'),
        string_agg('excluded.' || quote_ident(attname), ', ' ORDER BY attnum) FILTER (WHERE attname <> 'id'))
      INTO kept FROM (
        SELECT attname, attnum, EXISTS (SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = tbl AND a.attname = t.attname AND NOT a.attisdropped) AS copied
        FROM pg_attribute t WHERE attrelid = tombstones AND attnum > 0 AND NOT attisdropped) columns;
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
  PERFORM attach_snapshots(tbl, tombstones, in_id_order);
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
  PERFORM detach_snapshots(tbl);
END $$;

-- Where a post stands in the lists of posts sorted by id or by createdAt
-- (docs/api.md §5: a page at any depth costs about what the first one does).
-- Posts are counted per list (author_id 0: every post; else one author's) and
-- per range of 4 096 ids, with the range of created_at they have held. A page
-- at offset k adds up these counts, at most one row per 4 096 ids of the
-- list, to find the range it starts in, then walks the index from there:
-- fewer than 4 096 entries, where OFFSET k walks k of them. created_at does
-- not follow ids exactly (it is the transaction's start, and a seed or SQL may
-- set it), so for that order the ranges whose created_at spans overlap are
-- taken together (see post_page_start). A range's span only ever widens: a
-- delete makes it wider than its rows, which can only join ranges, never
-- misplace a post.
CREATE TABLE post_ranks (
  author_id bigint NOT NULL,
  bucket bigint NOT NULL,
  n integer NOT NULL,
  first_created timestamptz NOT NULL,
  last_created timestamptz NOT NULL,
  -- A list's ranges are read from the index alone: its rows lie one or two to a
  -- page, among the other lists' (measured: 0.6 ms for the 246 rows of every post
  -- by the heap, 0.05 ms by the index).
  PRIMARY KEY (author_id, bucket) INCLUDE (n, first_created, last_created)
) WITH (fillfactor = 80);

-- Posts: an insert locks its authors' count rows in id order, then the global
-- total, then its ranks in (list, range) order, so concurrent inserts never
-- wait for each other in a cycle.
SELECT attach_resource('posts', 'post', post_column => 'id', tombstones => 'deleted_posts',
  shown => ARRAY['title', 'body', 'author_id', 'created_at', 'updated_at'], in_id_order => true,
  on_insert => $$
    INSERT INTO author_post_counts (author_id, n)
      SELECT author_id, count(*) FROM new_rows GROUP BY author_id ORDER BY author_id
      ON CONFLICT (author_id) DO UPDATE SET n = author_post_counts.n + excluded.n;
    PERFORM bump_counter('posts', (SELECT count(*) FROM new_rows));
    INSERT INTO post_ranks (author_id, bucket, n, first_created, last_created)
      SELECT l.author_id, n.id >> 12, count(*), min(n.created_at), max(n.created_at)
      FROM new_rows n CROSS JOIN LATERAL (VALUES (0::bigint), (n.author_id)) l (author_id)
      GROUP BY 1, 2 ORDER BY 1, 2
      ON CONFLICT (author_id, bucket) DO UPDATE SET n = post_ranks.n + excluded.n,
        first_created = least(post_ranks.first_created, excluded.first_created),
        last_created = greatest(post_ranks.last_created, excluded.last_created);$$,
  on_delete => $$
    UPDATE author_post_counts a SET n = a.n - o.n
      FROM (SELECT author_id, count(*) AS n FROM old_rows GROUP BY author_id) o
      WHERE a.author_id = o.author_id;
    PERFORM bump_counter('posts', -(SELECT count(*) FROM old_rows));
    UPDATE post_ranks r SET n = r.n - o.n
      FROM (SELECT l.author_id, o.id >> 12 AS bucket, count(*) AS n
        FROM old_rows o CROSS JOIN LATERAL (VALUES (0::bigint), (o.author_id)) l (author_id) GROUP BY 1, 2) o
      WHERE r.author_id = o.author_id AND r.bucket = o.bucket;$$);

-- The service never changes a post's author or creation time; SQL may. Such a
-- post moves between ranks (only then is this trigger called).
CREATE FUNCTION posts_rerank() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE post_ranks SET n = n - 1 WHERE author_id IN (0, OLD.author_id) AND bucket = OLD.id >> 12;
  INSERT INTO post_ranks (author_id, bucket, n, first_created, last_created)
    VALUES (0, NEW.id >> 12, 1, NEW.created_at, NEW.created_at), (NEW.author_id, NEW.id >> 12, 1, NEW.created_at, NEW.created_at)
    ON CONFLICT (author_id, bucket) DO UPDATE SET n = post_ranks.n + 1,
      first_created = least(post_ranks.first_created, excluded.first_created),
      last_created = greatest(post_ranks.last_created, excluded.last_created);
  RETURN NULL;
END $$;
CREATE TRIGGER posts_rerank AFTER UPDATE OF id, author_id, created_at ON posts FOR EACH ROW
  WHEN ((OLD.id, OLD.author_id, OLD.created_at) IS DISTINCT FROM (NEW.id, NEW.author_id, NEW.created_at))
  EXECUTE FUNCTION posts_rerank();

-- Where the page at offset `skip` of a list of posts starts (scope 0: every
-- post; else an author's), sorted by id or by created_at, either way: the
-- first key of the range it falls in (from_id, or from_created), and how many
-- items of that list to skip from there (rest). The page itself is the
-- list's own query with `key >= from` (`<=` descending) and OFFSET rest.
-- With a snapshot and its top (see attach_snapshots), the counts are those of
-- the snapshot: ranges past top's are left out, the posts after top in its
-- range are taken off its count, the posts deleted since are added back. Keys are compared as numbers (created_at as epoch
-- seconds, exact to the microsecond in a double until the 23rd century),
-- negated when descending, so that one ascending walk serves both directions.
CREATE FUNCTION post_page_start(scope bigint, by_created boolean, descending boolean, skip bigint,
  snap pg_snapshot DEFAULT NULL, top bigint DEFAULT NULL,
  OUT from_id bigint, OUT from_created timestamptz, OUT rest bigint)
-- PL/pgSQL keeps the statement's plan for the session; an SQL function would plan it at each call.
LANGUAGE plpgsql STABLE AS $$
DECLARE
  sign float8 := CASE WHEN descending THEN -1 ELSE 1 END;
BEGIN
  WITH changed AS (
    SELECT d.id >> 12 AS bucket, 1 AS delta FROM deleted_posts d
      WHERE snap IS NOT NULL AND d.deleted_xid >= pg_snapshot_xmin(snap)
        AND NOT pg_visible_in_snapshot(d.deleted_xid, snap) AND d.id <= top AND (scope = 0 OR d.author_id = scope)
    UNION ALL
    SELECT p.id >> 12, -1 FROM posts p
      WHERE top IS NOT NULL AND p.id > top AND p.id < ((top >> 12) + 1) << 12 AND (scope = 0 OR p.author_id = scope)
  ),
  ranges AS (
    SELECT r.bucket, (r.n + coalesce(c.delta, 0))::int AS n,
      CASE WHEN descending THEN r.last_created ELSE r.first_created END AS edge,
      CASE WHEN NOT by_created THEN sign * (r.bucket << 12)
        WHEN descending THEN -date_part('epoch', r.last_created) ELSE date_part('epoch', r.first_created) END AS lo,
      CASE WHEN NOT by_created THEN sign * (r.bucket << 12) + 4095
        WHEN descending THEN -date_part('epoch', r.first_created) ELSE date_part('epoch', r.last_created) END AS hi
    FROM post_ranks r
      LEFT JOIN (SELECT bucket, sum(delta) AS delta FROM changed GROUP BY 1) c USING (bucket)
    WHERE r.author_id = scope AND (top IS NULL OR r.bucket <= top >> 12)
  ),
  -- In key order: the items before each range, and whether its keys all come after every key of the ranges
  -- before it (ids: always). Such a range starts a group that ends where the next one starts; the page's group
  -- is the last to start at or before `skip`.
  walked AS (
    SELECT lo, edge, sum(n) OVER keys - n AS before,
      lo > coalesce(max(hi) OVER (keys ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), lo - 1) AS starts
    FROM ranges WINDOW keys AS (ORDER BY lo, bucket)
  )
  SELECT CASE WHEN NOT by_created THEN (sign * lo)::bigint + CASE WHEN descending THEN 4095 ELSE 0 END END,
      CASE WHEN by_created THEN edge END, skip - before
    INTO from_id, from_created, rest
  FROM walked WHERE starts AND before <= skip ORDER BY lo DESC LIMIT 1;
END $$;

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

-- Tokens are no resource (no events), but their list has offset pages too.
SELECT attach_snapshots('tokens');

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

SELECT detach_snapshots('tokens');
DROP FUNCTION IF EXISTS post_page_start(bigint, boolean, boolean, bigint, pg_snapshot, bigint);
DROP TRIGGER IF EXISTS posts_rerank ON posts;
DROP FUNCTION IF EXISTS posts_rerank();
SELECT detach_resource('users', 'user'), detach_resource('comments', 'comment'), detach_resource('posts', 'post');
DROP TABLE IF EXISTS post_ranks;
DROP FUNCTION IF EXISTS detach_resource(regclass, text),
  attach_resource(regclass, text, text, regclass, text, text, text[], boolean),
  detach_snapshots(regclass), attach_snapshots(regclass, regclass, boolean), commit_in_id_order(),
  notify_from_outside(text), user_event_data(users), comment_event_data(comments), post_event_data(posts);
DROP TABLE IF EXISTS events;
DROP TABLE IF EXISTS events_pending;
