-- Re-drives the locked DLQ rows as PENDING outbox rows with the same id and 0 attempts. An outbox
-- row with the same id is replaced, so the re-drive always takes effect.
REPLACE INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
)
SELECT id, event_type, payload, payload_type, headers, partition_key, 'PENDING', 0,
       UTC_TIMESTAMP(6), NULL, created_at, UTC_TIMESTAMP(6), NULL, last_error
FROM {dlq}
WHERE id IN (?1)
