SELECT event_type, dlq_status, COUNT(*) AS row_count
FROM {dlq}
GROUP BY event_type, dlq_status
ORDER BY event_type, dlq_status
