-- Deletes PROCESSED rows last updated more than ? microseconds ago, oldest first and at most ?.
DELETE FROM {events}
WHERE status = 'PROCESSED' AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY updated_at, id
LIMIT ?
