-- Per event type with PENDING rows, how long the oldest of them has waited since it was written
-- (milliseconds, on the database's clock). Reads PENDING rows only.
SELECT event_type, status, COUNT(*) AS row_count,
       CAST(ROUND((julianday('now') - julianday(MIN(created_at))) * 86400000) AS INTEGER) AS oldest_age_ms
FROM {events}
WHERE status = 'PENDING'
GROUP BY event_type, status
