-- Dead letter queue: FAILED outbox rows waiting for a person, with the same id and data.
CREATE TABLE IF NOT EXISTS outbox_dlq_events (
    id            BINARY(16)   NOT NULL,
    event_type    VARCHAR(255) NOT NULL,
    payload       LONGTEXT     NOT NULL,
    payload_type  VARCHAR(255) NOT NULL,
    headers       LONGTEXT     NOT NULL CHECK (JSON_VALID(headers)),
    partition_key VARCHAR(255),
    status        VARCHAR(16)  NOT NULL,
    attempts      INT          NOT NULL DEFAULT 0,
    next_retry_at DATETIME(6)  NOT NULL,
    claim_token   BINARY(16),
    created_at    DATETIME(6)  NOT NULL,
    updated_at    DATETIME(6)  NOT NULL,
    processed_at  DATETIME(6),
    last_error    TEXT,
    dlq_status    VARCHAR(16)  NOT NULL CHECK (dlq_status IN ('MOVED', 'IN_PROCESS', 'RESOLVED', 'TO_RETRY')),
    moved_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    -- Listing in arrival order by status, and the transfer back (TO_RETRY rows in arrival order).
    INDEX outbox_dlq_events_by_moved_at (dlq_status, moved_at, id),
    -- DLQ clean-up: RESOLVED rows by age.
    INDEX outbox_dlq_events_by_updated_at (dlq_status, updated_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
