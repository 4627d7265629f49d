-- Locks FAILED rows, oldest first, for the move to the DLQ (fetched up to the batch, as claims).
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
FROM {events}
WHERE status = 'FAILED'
ORDER BY updated_at, id
FOR UPDATE SKIP LOCKED
