-- Returns messages of consumer ?1 PROCESSING since before the cut-off (now shifted by modifier ?2)
-- to RECEIVED, due now, counting the lost run as an attempt with error ?4; the one whose attempts
-- reach ?3 becomes FAILED. Only that consumer's rows: another consumer runs with its own lease and
-- attempts.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= ?3 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= ?3 THEN NULL ELSE {now} END,
    attempts = attempts + 1, last_error = ?4, claim_token = NULL, locked_at = NULL
WHERE consumer = ?1 AND status = 'PROCESSING' AND locked_at <= strftime({ts}, 'now', ?2)
