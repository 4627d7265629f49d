-- The in-flight state of inbox records. A transactional consumer records an id as applied with
-- its effect (`status` PROCESSED, the default, so older rows keep their meaning). A
-- non-transactional consumer claims the id first (PROCESSING, under `claim_token` since
-- `locked_at`), runs its effect, then marks it PROCESSED; a delivery that meets a claim within
-- its lease runs again later instead of being acknowledged as a duplicate, and a claim older than
-- the lease is taken over. Does nothing (ORA-01430) where the columns are there.
DECLARE
    PROCEDURE run(ddl VARCHAR2) IS
    BEGIN
        EXECUTE IMMEDIATE ddl;
    EXCEPTION
        WHEN OTHERS THEN
            IF SQLCODE NOT IN (-1430) THEN
                RAISE;
            END IF;
    END;
BEGIN
    run(q'[ALTER TABLE outbox_consumed_events ADD (status VARCHAR2(16 CHAR) DEFAULT 'PROCESSED' NOT NULL, claim_token RAW(16), locked_at TIMESTAMP(6))]');
END;
