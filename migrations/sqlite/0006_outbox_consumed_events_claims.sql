-- The in-flight state of inbox records. A transactional consumer records an id as applied with
-- its effect (`status` PROCESSED, the default, so older rows keep their meaning). A
-- non-transactional consumer claims the id first (PROCESSING, under `claim_token` since
-- `locked_at`), runs its effect, then marks it PROCESSED; a delivery that meets a claim within
-- its lease runs again later instead of being acknowledged as a duplicate, and a claim older than
-- the lease is taken over. SQLite has no ADD COLUMN IF NOT EXISTS, so this file runs once;
-- auto-create runs it only when pragma_table_info shows the column missing.
ALTER TABLE {consumed} ADD COLUMN status TEXT NOT NULL DEFAULT 'PROCESSED';
ALTER TABLE {consumed} ADD COLUMN claim_token TEXT;
ALTER TABLE {consumed} ADD COLUMN locked_at TEXT;
