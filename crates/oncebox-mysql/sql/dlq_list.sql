-- Rows matching the optional DLQ status and event type (each bound twice), ? rows after skipping ?.
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       dlq_status, moved_at
FROM {dlq}
WHERE (? IS NULL OR dlq_status = ?) AND (? IS NULL OR event_type = ?)
ORDER BY moved_at, id
LIMIT ? OFFSET ?
