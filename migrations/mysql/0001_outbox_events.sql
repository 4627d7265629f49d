-- Outbox rows written in the caller's transaction and relayed by the pollers.
-- Ids and claim tokens are BINARY(16), the UUID's bytes in big-endian order, so time-ordered v7 ids
-- append to the primary key instead of splitting pages. Timestamps are DATETIME(6) in UTC, always
-- set from the server's UTC_TIMESTAMP(6), so instances with different clocks or time zones agree on
-- what is due and what is stuck. MySQL 8 has no CREATE INDEX IF NOT EXISTS, so every index is part
-- of the table definition.
CREATE TABLE IF NOT EXISTS outbox_events (
    id            BINARY(16)   NOT NULL,
    event_type    VARCHAR(255) NOT NULL,
    payload       LONGTEXT     NOT NULL,
    payload_type  VARCHAR(255) NOT NULL,
    headers       LONGTEXT     NOT NULL CHECK (JSON_VALID(headers)),
    partition_key VARCHAR(255),
    status        VARCHAR(16)  NOT NULL CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
    attempts      INT          NOT NULL DEFAULT 0,
    next_retry_at DATETIME(6)  NOT NULL,
    claim_token   BINARY(16),
    created_at    DATETIME(6)  NOT NULL,
    updated_at    DATETIME(6)  NOT NULL,
    processed_at  DATETIME(6),
    last_error    TEXT,
    PRIMARY KEY (id),
    -- The claim: due PENDING rows of one type, oldest next_retry_at first. The scan follows this
    -- index in claim order, so FOR UPDATE SKIP LOCKED locks only the rows it returns.
    INDEX outbox_events_claim (event_type, status, next_retry_at, id),
    -- Stuck recovery (IN_PROCESS), clean-up (PROCESSED) and the transfer to the DLQ (FAILED), each
    -- by age.
    INDEX outbox_events_by_status (status, updated_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
