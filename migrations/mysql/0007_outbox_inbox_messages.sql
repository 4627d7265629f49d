-- Durable inbox: each message a listener stored before it acknowledged the broker, and the state of
-- its processing. The listener inserts RECEIVED (a redelivered id meets the primary key and makes
-- no second row); the inbox's pollers claim due rows (PROCESSING under claim_token since
-- locked_at), run the handler and settle: PROCESSED with the effect, RECEIVED again with
-- available_at pushed back and attempts + 1 after a failure, FAILED with available_at empty when
-- attempts run out. Ids and tokens are BINARY(16), times DATETIME(6) in UTC from UTC_TIMESTAMP(6).
CREATE TABLE IF NOT EXISTS outbox_inbox_messages (
    consumer       VARCHAR(255) NOT NULL,
    id             BINARY(16)   NOT NULL,
    event_type     VARCHAR(255) NOT NULL,
    payload_type   VARCHAR(255),
    payload        LONGBLOB     NOT NULL,
    headers        LONGTEXT     NOT NULL CHECK (JSON_VALID(headers)),
    source         VARCHAR(1000) NOT NULL,
    correlation_id VARCHAR(255),
    created_at     DATETIME(6),
    status         VARCHAR(16)  NOT NULL CHECK (status IN ('RECEIVED', 'PROCESSING', 'PROCESSED', 'FAILED')),
    attempts       INT          NOT NULL DEFAULT 0,
    received_at    DATETIME(6)  NOT NULL,
    available_at   DATETIME(6),
    processed_at   DATETIME(6),
    last_error     TEXT,
    claim_token    BINARY(16),
    locked_at      DATETIME(6),
    PRIMARY KEY (consumer, id),
    -- The claim: due RECEIVED rows of one consumer and type, oldest available_at first.
    INDEX outbox_inbox_messages_due (consumer, event_type, status, available_at, id),
    -- Stuck recovery (PROCESSING by locked_at) and clean-up (PROCESSED by processed_at).
    INDEX outbox_inbox_messages_by_status (status, locked_at),
    INDEX outbox_inbox_messages_processed (status, processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
