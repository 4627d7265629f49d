-- Outbox rows written in the caller's transaction and relayed by the pollers.
-- Every timestamp is TIMESTAMPTZ set from the database clock, so instances with different clocks or
-- time zones agree on what is due and what is stuck.
CREATE TABLE IF NOT EXISTS outbox_events (
    id            UUID        NOT NULL PRIMARY KEY,
    event_type    TEXT        NOT NULL,
    payload       TEXT        NOT NULL,
    payload_type  TEXT        NOT NULL,
    headers       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    partition_key TEXT,
    status        TEXT        NOT NULL CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
    attempts      INTEGER     NOT NULL DEFAULT 0,
    next_retry_at TIMESTAMPTZ NOT NULL,
    claim_token   UUID,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    processed_at  TIMESTAMPTZ,
    last_error    TEXT
);

-- The claim: due PENDING rows of one type, oldest next_retry_at first. Partial, so it holds only the
-- backlog and stays small however many processed rows wait for clean-up.
CREATE INDEX IF NOT EXISTS outbox_events_pending
    ON outbox_events (event_type, next_retry_at, id) WHERE status = 'PENDING';

-- Stuck recovery: IN_PROCESS rows by claim time.
CREATE INDEX IF NOT EXISTS outbox_events_in_process
    ON outbox_events (updated_at, id) WHERE status = 'IN_PROCESS';

-- Clean-up: PROCESSED rows by age.
CREATE INDEX IF NOT EXISTS outbox_events_processed
    ON outbox_events (updated_at, id) WHERE status = 'PROCESSED';

-- Transfer to the DLQ: FAILED rows, oldest first.
CREATE INDEX IF NOT EXISTS outbox_events_failed
    ON outbox_events (updated_at, id) WHERE status = 'FAILED';
