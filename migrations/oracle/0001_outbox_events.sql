-- Outbox rows written in the caller's transaction and relayed by the pollers.
-- Each file is one PL/SQL block, so it runs as one call and again without harm: `run` ignores
-- ORA-00955 (name already used), ORA-01408 (such column list already indexed) and ORA-01430
-- (column already exists), so two instances creating the tables at once both succeed.
-- Ids and claim tokens are RAW(16), the UUID's bytes in big-endian order (as MySQL's BINARY(16)),
-- so time-ordered v7 ids append to the primary key. Timestamps are TIMESTAMP(6) in UTC, always
-- set from SYS_EXTRACT_UTC(SYSTIMESTAMP), so instances with different clocks or time zones agree
-- on what is due and what is stuck. Oracle stores the empty string as NULL, so `payload` and
-- `payload_type` may be NULL, which reads back as empty text. `headers` is JSON text in a CLOB
-- with an IS JSON check (the 23ai JSON type would refuse nothing more that matters here and
-- would tie the schema to 21c+).
DECLARE
    PROCEDURE run(ddl VARCHAR2) IS
    BEGIN
        EXECUTE IMMEDIATE ddl;
    EXCEPTION
        WHEN OTHERS THEN
            IF SQLCODE NOT IN (-955, -1408, -1430) THEN
                RAISE;
            END IF;
    END;
BEGIN
    run(q'[
        CREATE TABLE outbox_events (
            id            RAW(16)            NOT NULL,
            event_type    VARCHAR2(255 CHAR) NOT NULL,
            payload       CLOB,
            payload_type  VARCHAR2(255 CHAR),
            headers       CLOB               NOT NULL CHECK (headers IS JSON),
            partition_key VARCHAR2(255 CHAR),
            status        VARCHAR2(16)       NOT NULL
                CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
            attempts      NUMBER(10)         DEFAULT 0 NOT NULL,
            next_retry_at TIMESTAMP(6)       NOT NULL,
            claim_token   RAW(16),
            created_at    TIMESTAMP(6)       NOT NULL,
            updated_at    TIMESTAMP(6)       NOT NULL,
            processed_at  TIMESTAMP(6),
            last_error    VARCHAR2(1000 CHAR),
            recoveries    NUMBER(10)         DEFAULT 0 NOT NULL,
            CONSTRAINT outbox_events_pk PRIMARY KEY (id)
        )]');
    -- The claim: due PENDING rows of one type, oldest next_retry_at first, read in index order.
    run('CREATE INDEX outbox_events_claim ON outbox_events (event_type, status, next_retry_at, id)');
    -- Stuck recovery (IN_PROCESS), clean-up (PROCESSED) and the transfer to the DLQ (FAILED).
    run('CREATE INDEX outbox_events_by_status ON outbox_events (status, updated_at, id)');
END;
