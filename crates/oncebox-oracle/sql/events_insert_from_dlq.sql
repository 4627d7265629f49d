-- Re-drives the locked DLQ rows as PENDING outbox rows with the same id, 0 attempts and 0
-- recoveries, due now. An outbox row with the same id was deleted first, so the re-drive always
-- takes effect.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
    recoveries
)
SELECT id, event_type, payload, payload_type, headers, partition_key, 'PENDING', 0,
       SYS_EXTRACT_UTC(SYSTIMESTAMP), NULL, created_at, SYS_EXTRACT_UTC(SYSTIMESTAMP), NULL, last_error,
       0
FROM {dlq}
WHERE id IN ({ids})
