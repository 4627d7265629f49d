-- Deletes records made more than ? microseconds ago, oldest first and at most ?, over all
-- consumers.
DELETE FROM {consumed}
WHERE consumed_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY consumed_at
LIMIT ?
