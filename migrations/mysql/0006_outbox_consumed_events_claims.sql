-- The in-flight state of inbox records. A transactional consumer records an id as applied with
-- its effect (`status` PROCESSED, the default, so older rows keep their meaning). A
-- non-transactional consumer claims the id first (PROCESSING, under `claim_token` since
-- `locked_at`), runs its effect, then marks it PROCESSED; a delivery that meets a claim within
-- its lease runs again later instead of being acknowledged as a duplicate, and a claim older than
-- the lease is taken over. MySQL 8 has no ADD COLUMN IF NOT EXISTS, so this file runs once;
-- auto-create runs it only when information_schema shows the column missing.
ALTER TABLE outbox_consumed_events
    ADD COLUMN status      VARCHAR(16) NOT NULL DEFAULT 'PROCESSED',
    ADD COLUMN claim_token BINARY(16)  NULL,
    ADD COLUMN locked_at   DATETIME(6) NULL;
