-- Which ids of $2 are recorded for consumer $1.
SELECT id FROM {consumed}
WHERE consumer = $1 AND id = ANY($2::uuid[])
