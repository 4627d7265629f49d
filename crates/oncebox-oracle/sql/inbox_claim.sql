-- Claims an id under a token, in flight from now. A plain insert: only a unique-constraint error
-- (ORA-00001) means "already there".
INSERT INTO {consumed} (consumer, id, consumed_at, status, claim_token, locked_at)
VALUES (:consumer, :id, SYS_EXTRACT_UTC(SYSTIMESTAMP), 'PROCESSING', :claim_token, SYS_EXTRACT_UTC(SYSTIMESTAMP))
