-- Makes the listed messages of consumer $1 PROCESSING under token $2 from now, re-checking that
-- each is still RECEIVED.
UPDATE {inbox}
SET status = 'PROCESSING', claim_token = $2, locked_at = clock_timestamp()
WHERE consumer = $1 AND id = ANY($3::uuid[]) AND status = 'RECEIVED'
