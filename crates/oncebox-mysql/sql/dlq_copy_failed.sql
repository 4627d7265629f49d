-- Copies the locked FAILED rows into the DLQ as MOVED. A DLQ row left with the same id is
-- replaced: the event failed again and the newest failure is the one to look at.
REPLACE INTO {dlq} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
    dlq_status, moved_at
)
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       'MOVED', UTC_TIMESTAMP(6)
FROM {events}
WHERE id IN (?1)
