-- Deletes RESOLVED rows last updated more than ? microseconds ago, oldest first and at most ?.
DELETE FROM {dlq}
WHERE dlq_status = 'RESOLVED' AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY updated_at, id
LIMIT ?
