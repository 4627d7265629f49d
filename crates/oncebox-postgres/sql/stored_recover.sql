-- Returns messages PROCESSING since more than $1 microseconds ago to RECEIVED, due now, counting
-- the lost run as an attempt with error $3; the one whose attempts reach $2 becomes FAILED. A row
-- whose holder is settling it right now is locked: the UPDATE waits, then finds it settled.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= $2 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= $2 THEN NULL ELSE clock_timestamp() END,
    attempts = attempts + 1, last_error = $3, claim_token = NULL, locked_at = NULL
WHERE status = 'PROCESSING' AND locked_at <= clock_timestamp() - $1 * INTERVAL '1 microsecond'
