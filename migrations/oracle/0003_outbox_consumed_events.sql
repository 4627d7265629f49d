-- Inbox: which event ids each consumer has already handled.
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
        CREATE TABLE outbox_consumed_events (
            consumer    VARCHAR2(255 CHAR) NOT NULL,
            id          RAW(16)            NOT NULL,
            consumed_at TIMESTAMP(6)       NOT NULL,
            CONSTRAINT outbox_consumed_events_pk PRIMARY KEY (consumer, id)
        )]');
    -- Inbox clean-up: records by age over all consumers.
    run('CREATE INDEX outbox_consumed_events_by_consumed_at ON outbox_consumed_events (consumed_at)');
END;
