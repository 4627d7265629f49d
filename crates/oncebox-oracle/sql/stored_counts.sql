-- Stored messages per consumer, event type and status.
SELECT consumer, event_type, status, COUNT(*) AS row_count
FROM {inbox}
GROUP BY consumer, event_type, status
ORDER BY consumer, event_type, status
