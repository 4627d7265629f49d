-- Gives up on row ?1, if it still holds claim ?2. An outcome restarts the count of recoveries
-- without one (see settle_retry.sql).
UPDATE {events}
SET status = 'FAILED', attempts = attempts + 1, last_error = ?3, updated_at = {now}, claim_token = NULL,
    recoveries = 0
WHERE id = ?1 AND status = 'IN_PROCESS' AND claim_token = ?2
