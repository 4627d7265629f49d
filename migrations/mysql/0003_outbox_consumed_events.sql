-- Inbox: which event ids each consumer has already handled.
CREATE TABLE IF NOT EXISTS outbox_consumed_events (
    consumer    VARCHAR(255) NOT NULL,
    id          BINARY(16)   NOT NULL,
    consumed_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (consumer, id),
    -- Inbox clean-up: records by age over all consumers.
    INDEX outbox_consumed_events_by_consumed_at (consumed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
