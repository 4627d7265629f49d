-- Marks a claim applied, only while token $3 still holds it.
UPDATE {consumed}
SET status = 'PROCESSED', claim_token = NULL, locked_at = NULL, consumed_at = clock_timestamp()
WHERE consumer = $1 AND id = $2 AND status = 'PROCESSING' AND claim_token = $3
