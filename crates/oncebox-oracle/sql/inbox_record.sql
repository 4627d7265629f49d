-- A plain insert: only a unique-constraint error (ORA-00001) means "already recorded". Oracle
-- rolls back just the failed statement, so a caller's transaction goes on after a duplicate.
INSERT INTO {consumed} (consumer, id, consumed_at)
VALUES (:consumer, :id, SYS_EXTRACT_UTC(SYSTIMESTAMP))
