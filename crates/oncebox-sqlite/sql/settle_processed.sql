-- Settles the rows whose ids are in the JSON array ?2 as delivered, if they still hold claim ?1.
-- An outcome restarts the count of recoveries without one (see settle_retry.sql).
UPDATE {events}
SET status = 'PROCESSED', attempts = attempts + 1, processed_at = {now}, updated_at = {now},
    claim_token = NULL, last_error = NULL, recoveries = 0
WHERE status = 'IN_PROCESS' AND claim_token = ?1 AND id IN (SELECT value FROM json_each(?2))
