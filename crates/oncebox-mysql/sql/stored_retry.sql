-- Settles a failed run: RECEIVED again, due ?4 microseconds from now, one attempt more, the error
-- ?5 kept; fenced by the token ?3. MySQL assigns left to right, so `attempts` goes last.
UPDATE {inbox}
SET status = 'RECEIVED', available_at = UTC_TIMESTAMP(6) + INTERVAL ?4 MICROSECOND, last_error = ?5,
    claim_token = NULL, locked_at = NULL, attempts = attempts + 1
WHERE consumer = ?1 AND id = ?2 AND claim_token = ?3 AND status = 'PROCESSING'
