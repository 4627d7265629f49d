-- Settles a failed run: RECEIVED again, due at now shifted by modifier ?4, one attempt more, the
-- error ?5 kept; fenced by the token ?3.
UPDATE {inbox}
SET status = 'RECEIVED', attempts = attempts + 1, available_at = strftime({ts}, 'now', ?4),
    last_error = ?5, claim_token = NULL, locked_at = NULL
WHERE consumer = ?1 AND id = ?2 AND claim_token = ?3 AND status = 'PROCESSING'
