-- How many times stuck recovery returned a row to PENDING, counted apart from `attempts`: a
-- crashed worker is not a failed send, but an event that kills every worker sending it must not be
-- claimed first forever. The recovery that brings a row to `stuck-recovery.max-recoveries` makes
-- it FAILED. Claims never reset the count; a row re-driven from the DLQ starts again at 0.
-- Idempotent, so tables created before this column existed get it on the next start. The catalog
-- is asked first: ALTER TABLE takes an ACCESS EXCLUSIVE lock even when the column exists, which
-- would queue every publisher behind any long read of the table at each start.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'outbox_events' AND column_name = 'recoveries'
    ) THEN
        ALTER TABLE outbox_events ADD COLUMN recoveries INTEGER NOT NULL DEFAULT 0;
    END IF;
END
$$;
