-- Of the rows with ids ?2 that are not IN_PROCESS (those a status change would touch), how many
-- were written more than ?1 microseconds ago, and how long ago the oldest of them was
-- (milliseconds, 0 when none), on the database's clock. Reads no payloads.
SELECT COUNT(*) AS row_count,
       CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000, 0) AS SIGNED)
           AS oldest_age_ms
FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND id IN (?2)
  AND created_at < UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
