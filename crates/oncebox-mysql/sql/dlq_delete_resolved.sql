-- Deletes RESOLVED rows last updated more than ?1 microseconds ago, oldest first and at most ?2.
DELETE FROM {dlq}
WHERE dlq_status = 'RESOLVED' AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
ORDER BY updated_at, id
LIMIT ?2
