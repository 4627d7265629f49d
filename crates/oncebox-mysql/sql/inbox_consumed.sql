-- Which of the listed ids are recorded as applied for consumer ?1 (a claim in flight is not).
SELECT id FROM {consumed}
WHERE consumer = ?1 AND id IN (?2) AND status = 'PROCESSED'
