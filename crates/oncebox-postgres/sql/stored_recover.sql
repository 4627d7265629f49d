-- Returns messages of consumer $1 PROCESSING since more than $2 microseconds ago to RECEIVED, due
-- now, counting the lost run as an attempt with error $4; the one whose attempts reach $3 becomes
-- FAILED. Only that consumer's rows: another consumer runs with its own lease and attempts. A row
-- whose holder is settling it right now is locked: the UPDATE waits, then finds it settled.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= $3 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= $3 THEN NULL ELSE clock_timestamp() END,
    attempts = attempts + 1, last_error = $4, claim_token = NULL, locked_at = NULL
WHERE consumer = $1 AND status = 'PROCESSING'
  AND locked_at <= clock_timestamp() - $2 * INTERVAL '1 microsecond'
