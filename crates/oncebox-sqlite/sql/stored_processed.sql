-- Settles a claimed message PROCESSED, fenced by its token ?3: no row when another claim holds it.
UPDATE {inbox}
SET status = 'PROCESSED', processed_at = {now}, available_at = NULL, claim_token = NULL,
    locked_at = NULL
WHERE consumer = ?1 AND id = ?2 AND claim_token = ?3 AND status = 'PROCESSING'
