SELECT event_type, status, COUNT(*) AS row_count
FROM {events}
GROUP BY event_type, status
ORDER BY event_type, status
