SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       dlq_status, moved_at
FROM {dlq}
WHERE id = :id
