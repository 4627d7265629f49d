-- Which ids of the JSON array ?2 are recorded as applied for consumer ?1 (a claim in flight is not).
SELECT id FROM {consumed}
WHERE consumer = ?1 AND id IN (SELECT value FROM json_each(?2)) AND status = 'PROCESSED'
