-- The hand-written settle of the raw ceiling: every claimed row ($1) delivered, guarded by the
-- claim token $2.
UPDATE {events}
SET status = 'PROCESSED', attempts = attempts + 1, processed_at = now(), updated_at = now(),
    claim_token = NULL
WHERE id = ANY($1) AND status = 'IN_PROCESS' AND claim_token = $2
