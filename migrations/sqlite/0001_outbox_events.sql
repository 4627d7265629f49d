-- Outbox rows written in the caller's transaction and relayed by the pollers.
-- Timestamps are fixed-width UTC text ('2025-01-31T12:00:00.000Z') so they compare in time order.
CREATE TABLE IF NOT EXISTS {events} (
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
    last_error    TEXT
) STRICT;

-- The claim query: due PENDING rows of one type, oldest first.
CREATE INDEX IF NOT EXISTS {events}_by_type_status_next_retry
    ON {events} (event_type, status, next_retry_at);

-- Stuck recovery and clean-up: rows in one status by age.
CREATE INDEX IF NOT EXISTS {events}_by_status_updated_at
    ON {events} (status, updated_at);
