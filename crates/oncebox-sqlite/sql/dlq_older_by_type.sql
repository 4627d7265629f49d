-- Of the rows of event type ?2 that are not IN_PROCESS (those a status change would touch), how
-- many were written before the cut-off (now shifted by modifier ?1), and how long ago the oldest
-- of them was (milliseconds, 0 when none), on the database's clock. Reads no payloads.
SELECT COUNT(*) AS row_count,
       CAST(COALESCE(ROUND((julianday('now') - julianday(MIN(created_at))) * 86400000), 0) AS INTEGER)
           AS oldest_age_ms
FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND event_type = ?2
  AND created_at < strftime({ts}, 'now', ?1)
