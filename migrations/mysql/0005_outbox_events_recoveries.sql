-- How many times stuck recovery returned a row to PENDING, counted apart from `attempts`: a
-- crashed worker is not a failed send, but an event that kills every worker sending it must not be
-- claimed first forever. The recovery that brings a row to `stuck-recovery.max-recoveries` makes
-- it FAILED. Claims never reset the count; a row re-driven from the DLQ starts again at 0.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS, so this file runs once; auto-create runs it only when
-- information_schema shows the column missing.
ALTER TABLE outbox_events ADD COLUMN recoveries INT NOT NULL DEFAULT 0;
