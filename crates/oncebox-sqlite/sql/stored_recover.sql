-- Returns messages PROCESSING since before the cut-off (now shifted by modifier ?1) to RECEIVED,
-- due now, counting the lost run as an attempt with error ?3; the one whose attempts reach ?2
-- becomes FAILED.
UPDATE {inbox}
SET status = CASE WHEN attempts + 1 >= ?2 THEN 'FAILED' ELSE 'RECEIVED' END,
    available_at = CASE WHEN attempts + 1 >= ?2 THEN NULL ELSE {now} END,
    attempts = attempts + 1, last_error = ?3, claim_token = NULL, locked_at = NULL
WHERE status = 'PROCESSING' AND locked_at <= strftime({ts}, 'now', ?1)
