-- Copies the locked FAILED rows into the DLQ as MOVED, with the same id and data.
INSERT INTO {dlq} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
    dlq_status, moved_at
)
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       'MOVED', SYS_EXTRACT_UTC(SYSTIMESTAMP)
FROM {events}
WHERE id IN ({ids})
