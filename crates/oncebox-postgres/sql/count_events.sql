-- Rows per event type and status, and how long the oldest row of the group has waited since its
-- commit (milliseconds, on the database's clock): for PENDING, the age of the oldest undelivered event.
SELECT event_type, status, COUNT(*) AS row_count,
       CAST(EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000 AS BIGINT) AS oldest_age_ms
FROM {events}
GROUP BY event_type, status
ORDER BY event_type, status
