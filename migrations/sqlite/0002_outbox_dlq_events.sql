-- Dead letter queue: FAILED outbox rows waiting for a person, with the same id and data.
CREATE TABLE IF NOT EXISTS {dlq} (
    id            TEXT    NOT NULL PRIMARY KEY,
    event_type    TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    payload_type  TEXT    NOT NULL,
    headers       TEXT    NOT NULL DEFAULT '{}',
    partition_key TEXT,
    status        TEXT    NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_retry_at TEXT    NOT NULL,
    claim_token   TEXT,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    processed_at  TEXT,
    last_error    TEXT,
    dlq_status    TEXT    NOT NULL,
    moved_at      TEXT    NOT NULL
) STRICT;

-- Listing and the transfer-from job: rows in one DLQ state in arrival order.
CREATE INDEX IF NOT EXISTS {dlq}_by_dlq_status_moved_at
    ON {dlq} (dlq_status, moved_at);

-- DLQ clean-up: RESOLVED rows by age.
CREATE INDEX IF NOT EXISTS {dlq}_by_dlq_status_updated_at
    ON {dlq} (dlq_status, updated_at);
