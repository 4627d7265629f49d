-- The in-flight state of inbox records. A transactional consumer records an id as applied with
-- its effect (`status` PROCESSED, the default, so older rows keep their meaning). A
-- non-transactional consumer claims the id first (PROCESSING, under `claim_token` since
-- `locked_at`), runs its effect, then marks it PROCESSED; a delivery that meets a claim within
-- its lease runs again later instead of being acknowledged as a duplicate, and a claim older than
-- the lease is taken over. Idempotent, asking the catalog first like 0005.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'outbox_consumed_events' AND column_name = 'status'
    ) THEN
        ALTER TABLE outbox_consumed_events
            ADD COLUMN status      VARCHAR(16) NOT NULL DEFAULT 'PROCESSED',
            ADD COLUMN claim_token UUID,
            ADD COLUMN locked_at   TIMESTAMPTZ;
    END IF;
END
$$;
