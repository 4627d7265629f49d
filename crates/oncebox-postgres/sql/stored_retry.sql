-- Settles a failed run: RECEIVED again, due $4 microseconds from now, one attempt more, the error
-- $5 kept; fenced by the token $3.
UPDATE {inbox}
SET status = 'RECEIVED', attempts = attempts + 1,
    available_at = clock_timestamp() + $4 * INTERVAL '1 microsecond', last_error = $5,
    claim_token = NULL, locked_at = NULL
WHERE consumer = $1 AND id = $2 AND claim_token = $3 AND status = 'PROCESSING'
