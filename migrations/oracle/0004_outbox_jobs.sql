-- Job locks: one lease row per named background job, shared by every instance.
DECLARE
    PROCEDURE run(ddl VARCHAR2) IS
    BEGIN
        EXECUTE IMMEDIATE ddl;
    EXCEPTION
        WHEN OTHERS THEN
            IF SQLCODE NOT IN (-955) THEN
                RAISE;
            END IF;
    END;
BEGIN
    run(q'[
        CREATE TABLE outbox_jobs (
            name         VARCHAR2(255 CHAR) NOT NULL,
            locked_until TIMESTAMP(6)       NOT NULL,
            locked_at    TIMESTAMP(6)       NOT NULL,
            locked_by    RAW(16)            NOT NULL,
            CONSTRAINT outbox_jobs_pk PRIMARY KEY (name)
        )]');
END;
