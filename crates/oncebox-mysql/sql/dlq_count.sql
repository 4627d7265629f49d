SELECT COUNT(*) AS row_count
FROM {dlq}
WHERE (? IS NULL OR dlq_status = ?) AND (? IS NULL OR event_type = ?)
