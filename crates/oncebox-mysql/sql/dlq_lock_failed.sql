-- Locks up to ?1 FAILED rows, oldest first, for the move to the DLQ.
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
FROM {events} FORCE INDEX ({prefix}outbox_events_by_status)
WHERE status = 'FAILED'
ORDER BY updated_at, id
LIMIT ?1
FOR UPDATE SKIP LOCKED
