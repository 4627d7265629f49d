-- Inbox: which event ids each consumer has already handled.
CREATE TABLE IF NOT EXISTS outbox_consumed_events (
    consumer    TEXT        NOT NULL,
    id          UUID        NOT NULL,
    consumed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, id)
);

-- Inbox clean-up: records by age over all consumers.
CREATE INDEX IF NOT EXISTS outbox_consumed_events_by_consumed_at
    ON outbox_consumed_events (consumed_at);
