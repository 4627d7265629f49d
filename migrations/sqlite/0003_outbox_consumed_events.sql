-- Inbox: which event ids each consumer has already handled.
CREATE TABLE IF NOT EXISTS {consumed} (
    consumer    TEXT NOT NULL,
    id          TEXT NOT NULL,
    consumed_at TEXT NOT NULL,
    PRIMARY KEY (consumer, id)
) STRICT, WITHOUT ROWID;

-- Inbox clean-up: records by age over all consumers.
CREATE INDEX IF NOT EXISTS {consumed}_by_consumed_at
    ON {consumed} (consumed_at);
