-- Settles the listed rows as delivered, if they still hold claim token ?1.
UPDATE {events}
SET status = 'PROCESSED', attempts = attempts + 1, processed_at = UTC_TIMESTAMP(6),
    updated_at = UTC_TIMESTAMP(6), claim_token = NULL, last_error = NULL
WHERE status = 'IN_PROCESS' AND claim_token = ?1 AND id IN (?2)
