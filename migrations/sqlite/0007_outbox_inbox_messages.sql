-- Durable inbox: each message a listener stored before it acknowledged the broker, and the state of
-- its processing. The listener inserts RECEIVED (a redelivered id meets the primary key and makes
-- no second row); the inbox's pollers claim due rows (PROCESSING under claim_token since
-- locked_at), run the handler and settle: PROCESSED with the effect, RECEIVED again with
-- available_at pushed back and attempts + 1 after a failure, FAILED with available_at empty when
-- attempts run out. Times are fixed-width UTC text, so they compare in time order.
CREATE TABLE IF NOT EXISTS {inbox} (
    consumer       TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    payload_type   TEXT,
    payload        BLOB    NOT NULL,
    headers        TEXT    NOT NULL DEFAULT '{}',
    source         TEXT    NOT NULL,
    correlation_id TEXT,
    created_at     TEXT,
    status         TEXT    NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    received_at    TEXT    NOT NULL,
    available_at   TEXT,
    processed_at   TEXT,
    last_error     TEXT,
    claim_token    TEXT,
    locked_at      TEXT,
    PRIMARY KEY (consumer, id)
) STRICT, WITHOUT ROWID;

-- The claim: due RECEIVED rows of one consumer and type, oldest first.
CREATE INDEX IF NOT EXISTS {inbox}_due
    ON {inbox} (consumer, event_type, status, available_at);

-- Stuck recovery and clean-up.
CREATE INDEX IF NOT EXISTS {inbox}_by_status_locked_at ON {inbox} (status, locked_at);
CREATE INDEX IF NOT EXISTS {inbox}_by_status_processed_at ON {inbox} (status, processed_at);
