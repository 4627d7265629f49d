-- Of the rows with ids $2 that are not IN_PROCESS (those a status change would touch), how many
-- were written more than $1 microseconds ago, and how long ago the oldest of them was
-- (milliseconds, 0 when none), on the database's clock. Reads no payloads.
SELECT COUNT(*) AS row_count,
       CAST(COALESCE(EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000, 0) AS BIGINT) AS oldest_age_ms
FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND id = ANY($2::uuid[])
  AND created_at < now() - $1 * INTERVAL '1 microsecond'
