-- Rows matching the optional DLQ status and event type, :max_rows rows after skipping :skip.
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       dlq_status, moved_at
FROM {dlq}
WHERE (:dlq_status IS NULL OR dlq_status = :dlq_status)
  AND (:event_type IS NULL OR event_type = :event_type)
ORDER BY moved_at, id
OFFSET :skip ROWS FETCH NEXT :max_rows ROWS ONLY
