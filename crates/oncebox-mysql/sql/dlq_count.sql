SELECT COUNT(*) AS row_count
FROM {dlq}
WHERE (?1 IS NULL OR dlq_status = ?1) AND (?2 IS NULL OR event_type = ?2)
