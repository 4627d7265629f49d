-- Deletes PROCESSED messages of consumer ?1 processed more than ?2 microseconds ago, oldest first
-- and at most ?3.
DELETE FROM {inbox}
WHERE consumer = ?1 AND status = 'PROCESSED' AND processed_at <= UTC_TIMESTAMP(6) - INTERVAL ?2 MICROSECOND
ORDER BY processed_at
LIMIT ?3
