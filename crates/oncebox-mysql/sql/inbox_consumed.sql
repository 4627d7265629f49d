-- Which of the listed ids are recorded for consumer ?1.
SELECT id FROM {consumed}
WHERE consumer = ?1 AND id IN (?2)
