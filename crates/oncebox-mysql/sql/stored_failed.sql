-- Settles a run that gives the message up: FAILED, one attempt more, never due again, the error ?4
-- kept; fenced by the token ?3.
UPDATE {inbox}
SET status = 'FAILED', available_at = NULL, last_error = ?4, claim_token = NULL, locked_at = NULL,
    attempts = attempts + 1
WHERE consumer = ?1 AND id = ?2 AND claim_token = ?3 AND status = 'PROCESSING'
