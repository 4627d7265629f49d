SELECT COUNT(*) AS row_count
FROM {dlq}
WHERE (:dlq_status IS NULL OR dlq_status = :dlq_status)
  AND (:event_type IS NULL OR event_type = :event_type)
