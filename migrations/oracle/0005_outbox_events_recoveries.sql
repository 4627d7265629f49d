-- How many times stuck recovery returned a row to PENDING, counted apart from `attempts`. The
-- table of 0001 already has the column; this file adds it to tables made before it existed, and
-- does nothing (ORA-01430) where it is there.
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
    run('ALTER TABLE outbox_events ADD (recoveries NUMBER(10) DEFAULT 0 NOT NULL)');
END;
