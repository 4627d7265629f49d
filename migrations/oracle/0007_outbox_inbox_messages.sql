-- Durable inbox: each message a listener stored before it acknowledged the broker, and the state of
-- its processing. The listener inserts RECEIVED (a redelivered id meets the primary key and makes
-- no second row); the inbox's pollers claim due rows (PROCESSING under claim_token since
-- locked_at), run the handler and settle: PROCESSED with the effect, RECEIVED again with
-- available_at pushed back and attempts + 1 after a failure, FAILED with available_at empty when
-- attempts run out. Ids and tokens are RAW(16), times TIMESTAMP(6) in UTC. The payload is a BLOB:
-- the bytes as the broker gave them, which need not be text.
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
        CREATE TABLE outbox_inbox_messages (
            consumer       VARCHAR2(255 CHAR)  NOT NULL,
            id             RAW(16)             NOT NULL,
            event_type     VARCHAR2(255 CHAR)  NOT NULL,
            payload_type   VARCHAR2(255 CHAR),
            payload        BLOB,
            headers        CLOB                NOT NULL CHECK (headers IS JSON),
            source         VARCHAR2(1000 CHAR) NOT NULL,
            correlation_id VARCHAR2(255 CHAR),
            created_at     TIMESTAMP(6),
            status         VARCHAR2(16)        NOT NULL
                CHECK (status IN ('RECEIVED', 'PROCESSING', 'PROCESSED', 'FAILED')),
            attempts       NUMBER(10)          DEFAULT 0 NOT NULL,
            received_at    TIMESTAMP(6)        NOT NULL,
            available_at   TIMESTAMP(6),
            processed_at   TIMESTAMP(6),
            last_error     VARCHAR2(1000 CHAR),
            claim_token    RAW(16),
            locked_at      TIMESTAMP(6),
            CONSTRAINT outbox_inbox_messages_pk PRIMARY KEY (consumer, id)
        )]');
    -- The claim: due RECEIVED rows of one consumer and type, oldest available_at first.
    run('CREATE INDEX outbox_inbox_messages_due ON outbox_inbox_messages (consumer, event_type, status, available_at, id)');
    -- Stuck recovery and clean-up.
    run('CREATE INDEX outbox_inbox_messages_by_locked ON outbox_inbox_messages (status, locked_at)');
    run('CREATE INDEX outbox_inbox_messages_processed ON outbox_inbox_messages (status, processed_at)');
END;
