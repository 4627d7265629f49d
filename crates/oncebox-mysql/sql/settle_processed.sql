-- Settles the listed rows as delivered, if they still hold claim token ?1. An outcome restarts
-- the count of recoveries without one (see settle_outcomes.sql).
UPDATE {events}
SET status = 'PROCESSED', attempts = attempts + 1, processed_at = UTC_TIMESTAMP(6),
    updated_at = UTC_TIMESTAMP(6), claim_token = NULL, last_error = NULL, recoveries = 0
WHERE status = 'IN_PROCESS' AND claim_token = ?1 AND id IN (?2)
