-- Up Migration

-- Idempotency records keep what a replay needs and no more (src/routes/idempotency.ts):
-- which resource the first response described, so that deleting it also drops
-- the copy of its content kept for replays (a replay then says the resource is
-- gone instead of handing the deleted content back); and, for a sign-up, the
-- password's hash (the same scrypt string as users.password_hash) to tell a
-- retry from another request without hashing the password a second time.
ALTER TABLE idempotency_keys
  -- 'post:<id>', 'comment:<id>' or 'user:<id>'; NULL on records older than this column.
  ADD COLUMN resource text,
  ADD COLUMN secret_hash text,
  -- NULL once the resource is deleted.
  ALTER COLUMN body DROP NOT NULL;
CREATE INDEX idempotency_keys_resource_idx ON idempotency_keys (resource) WHERE resource IS NOT NULL;

-- Statement triggers with the deleted rows as a transition table: one UPDATE
-- per DELETE statement, also for the comments a post's deletion cascades to.
CREATE FUNCTION forget_idempotent_responses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE idempotency_keys SET body = NULL
   WHERE resource IN (SELECT TG_ARGV[0] || ':' || gone.id FROM gone) AND body IS NOT NULL;
  RETURN NULL;
END $$;
CREATE TRIGGER posts_forget_idempotent AFTER DELETE ON posts REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION forget_idempotent_responses('post');
CREATE TRIGGER comments_forget_idempotent AFTER DELETE ON comments REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION forget_idempotent_responses('comment');

-- Down Migration

DROP TRIGGER IF EXISTS comments_forget_idempotent ON comments;
DROP TRIGGER IF EXISTS posts_forget_idempotent ON posts;
DROP FUNCTION IF EXISTS forget_idempotent_responses();
DROP INDEX IF EXISTS idempotency_keys_resource_idx;
DELETE FROM idempotency_keys WHERE body IS NULL;
ALTER TABLE idempotency_keys
  ALTER COLUMN body SET NOT NULL,
  DROP COLUMN secret_hash,
  DROP COLUMN resource;
