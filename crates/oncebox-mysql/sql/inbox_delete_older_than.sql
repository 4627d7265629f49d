-- Deletes records made more than ?1 microseconds ago, oldest first and at most ?2, over all
-- consumers.
DELETE FROM {consumed}
WHERE consumed_at <= UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
ORDER BY consumed_at
LIMIT ?2
