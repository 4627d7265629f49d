-- Durable inbox: each message a listener stored before it acknowledged the broker, and the state of
-- its processing. The listener inserts RECEIVED (a redelivered id meets the primary key and makes
-- no second row); the inbox's pollers claim due rows (PROCESSING under claim_token since
-- locked_at), run the handler and settle: PROCESSED with the effect, RECEIVED again with
-- available_at pushed back and attempts + 1 after a failure, FAILED with available_at empty when
-- attempts run out. Every time is the database clock's.
CREATE TABLE IF NOT EXISTS outbox_inbox_messages (
    consumer       TEXT        NOT NULL,
    id             UUID        NOT NULL,
    event_type     TEXT        NOT NULL,
    payload_type   TEXT,
    payload        BYTEA       NOT NULL,
    headers        JSONB       NOT NULL DEFAULT '{}'::jsonb,
    source         TEXT        NOT NULL,
    correlation_id TEXT,
    created_at     TIMESTAMPTZ,
    status         TEXT        NOT NULL CHECK (status IN ('RECEIVED', 'PROCESSING', 'PROCESSED', 'FAILED')),
    attempts       INTEGER     NOT NULL DEFAULT 0,
    received_at    TIMESTAMPTZ NOT NULL,
    available_at   TIMESTAMPTZ,
    processed_at   TIMESTAMPTZ,
    last_error     TEXT,
    claim_token    UUID,
    locked_at      TIMESTAMPTZ,
    PRIMARY KEY (consumer, id)
);

-- The claim: due RECEIVED rows of one consumer and type, oldest available_at first. Partial, so it
-- holds only the backlog.
CREATE INDEX IF NOT EXISTS outbox_inbox_messages_due
    ON outbox_inbox_messages (consumer, event_type, available_at, id) WHERE status = 'RECEIVED';

-- Stuck recovery: PROCESSING rows by claim time.
CREATE INDEX IF NOT EXISTS outbox_inbox_messages_processing
    ON outbox_inbox_messages (locked_at) WHERE status = 'PROCESSING';

-- Clean-up: PROCESSED rows by age.
CREATE INDEX IF NOT EXISTS outbox_inbox_messages_processed
    ON outbox_inbox_messages (processed_at) WHERE status = 'PROCESSED';
