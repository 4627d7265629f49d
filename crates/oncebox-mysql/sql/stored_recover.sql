-- Returns messages PROCESSING since more than ?1 microseconds ago to RECEIVED, due now, counting
-- the lost run as an attempt with error ?3; the one whose attempts reach ?2 becomes FAILED. MySQL
-- assigns left to right, each assignment seeing the ones before it, so `attempts` goes last.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= ?2 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= ?2 THEN NULL ELSE UTC_TIMESTAMP(6) END,
    last_error = ?3, claim_token = NULL, locked_at = NULL, attempts = attempts + 1
WHERE status = 'PROCESSING' AND locked_at <= UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
