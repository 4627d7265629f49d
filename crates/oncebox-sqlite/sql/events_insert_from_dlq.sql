-- Re-drives the DLQ rows being moved as new PENDING outbox rows with the same id and 0 attempts.
-- An outbox row with the same id is replaced, so the re-drive always takes effect.
INSERT OR REPLACE INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
)
SELECT id, event_type, payload, payload_type, headers, partition_key, 'PENDING', 0,
       {now}, NULL, created_at, {now}, NULL, last_error
FROM {dlq}
WHERE dlq_status = 'IN_PROCESS'
