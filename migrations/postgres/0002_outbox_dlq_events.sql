-- Dead letter queue: FAILED outbox rows waiting for a person, with the same id and data.
CREATE TABLE IF NOT EXISTS outbox_dlq_events (
    id            UUID        NOT NULL PRIMARY KEY,
    event_type    TEXT        NOT NULL,
    payload       TEXT        NOT NULL,
    payload_type  TEXT        NOT NULL,
    headers       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    partition_key TEXT,
    status        TEXT        NOT NULL,
    attempts      INTEGER     NOT NULL DEFAULT 0,
    next_retry_at TIMESTAMPTZ NOT NULL,
    claim_token   UUID,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    processed_at  TIMESTAMPTZ,
    last_error    TEXT,
    dlq_status    TEXT        NOT NULL CHECK (dlq_status IN ('MOVED', 'IN_PROCESS', 'RESOLVED', 'TO_RETRY')),
    moved_at      TIMESTAMPTZ NOT NULL
);

-- Listing in arrival order, optionally by status.
CREATE INDEX IF NOT EXISTS outbox_dlq_events_by_moved_at
    ON outbox_dlq_events (dlq_status, moved_at, id);

-- The transfer-from job: TO_RETRY rows in arrival order.
CREATE INDEX IF NOT EXISTS outbox_dlq_events_to_retry
    ON outbox_dlq_events (moved_at, id) WHERE dlq_status = 'TO_RETRY';

-- DLQ clean-up: RESOLVED rows by age.
CREATE INDEX IF NOT EXISTS outbox_dlq_events_resolved
    ON outbox_dlq_events (updated_at, id) WHERE dlq_status = 'RESOLVED';
