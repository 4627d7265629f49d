-- Returns messages of :consumer PROCESSING since more than the lease to RECEIVED, due now, counting the lost
-- run as an attempt with :last_error; the one whose attempts reach :max_attempts becomes FAILED,
-- never due again. Every SET expression reads the row as it was. There is no row limit, so one
-- UPDATE does it, with no cursor: a row whose holder is settling it right now is locked, the
-- UPDATE waits for it, and Oracle re-checks the WHERE clause on the committed row (restarting
-- the statement when it changed), so a settled row is left as it is.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= :max_attempts THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= :max_attempts THEN NULL ELSE SYS_EXTRACT_UTC(SYSTIMESTAMP) END,
    attempts = attempts + 1, last_error = :last_error, claim_token = NULL, locked_at = NULL
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND status = 'PROCESSING'
  AND locked_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:lease_micros / 1000000, 'SECOND')
