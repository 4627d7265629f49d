-- Returns messages of consumer ?1 PROCESSING since more than ?2 microseconds ago to RECEIVED, due
-- now, counting the lost run as an attempt with error ?4; the one whose attempts reach ?3 becomes
-- FAILED. Only that consumer's rows: another consumer runs with its own lease and attempts. MySQL
-- assigns left to right, each assignment seeing the ones before it, so `attempts` goes last.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= ?3 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= ?3 THEN NULL ELSE UTC_TIMESTAMP(6) END,
    last_error = ?4, claim_token = NULL, locked_at = NULL, attempts = attempts + 1
WHERE consumer = ?1 AND status = 'PROCESSING' AND locked_at <= UTC_TIMESTAMP(6) - INTERVAL ?2 MICROSECOND
