-- Dead letter queue: FAILED outbox rows waiting for a person, with the same id and data.
DECLARE
    PROCEDURE run(ddl VARCHAR2) IS
    BEGIN
        EXECUTE IMMEDIATE ddl;
    EXCEPTION
        WHEN OTHERS THEN
            IF SQLCODE NOT IN (-955, -1408) THEN
                RAISE;
            END IF;
    END;
BEGIN
    run(q'[
        CREATE TABLE outbox_dlq_events (
            id            RAW(16)            NOT NULL,
            event_type    VARCHAR2(255 CHAR) NOT NULL,
            payload       CLOB,
            payload_type  VARCHAR2(255 CHAR),
            headers       CLOB               NOT NULL CHECK (headers IS JSON),
            partition_key VARCHAR2(255 CHAR),
            status        VARCHAR2(16)       NOT NULL,
            attempts      NUMBER(10)         DEFAULT 0 NOT NULL,
            next_retry_at TIMESTAMP(6)       NOT NULL,
            claim_token   RAW(16),
            created_at    TIMESTAMP(6)       NOT NULL,
            updated_at    TIMESTAMP(6)       NOT NULL,
            processed_at  TIMESTAMP(6),
            last_error    VARCHAR2(1000 CHAR),
            dlq_status    VARCHAR2(16)       NOT NULL
                CHECK (dlq_status IN ('MOVED', 'IN_PROCESS', 'RESOLVED', 'TO_RETRY')),
            moved_at      TIMESTAMP(6)       NOT NULL,
            CONSTRAINT outbox_dlq_events_pk PRIMARY KEY (id)
        )]');
    -- Listing in arrival order by status, and the transfer back (TO_RETRY rows in arrival order).
    run('CREATE INDEX outbox_dlq_events_by_moved_at ON outbox_dlq_events (dlq_status, moved_at, id)');
    -- DLQ clean-up: RESOLVED rows by age.
    run('CREATE INDEX outbox_dlq_events_by_updated_at ON outbox_dlq_events (dlq_status, updated_at, id)');
END;
