-- Which ids of the JSON array ?2 are recorded for consumer ?1.
SELECT id FROM {consumed}
WHERE consumer = ?1 AND id IN (SELECT value FROM json_each(?2))
