-- Which ids of $2 are recorded as applied for consumer $1 (a claim in flight is not).
SELECT id FROM {consumed}
WHERE consumer = $1 AND id = ANY($2::uuid[]) AND status = 'PROCESSED'
