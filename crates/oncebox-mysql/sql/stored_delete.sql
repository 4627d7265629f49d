-- Deletes PROCESSED messages processed more than ?1 microseconds ago, oldest first and at most ?2.
DELETE FROM {inbox}
WHERE status = 'PROCESSED' AND processed_at <= UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
ORDER BY processed_at
LIMIT ?2
