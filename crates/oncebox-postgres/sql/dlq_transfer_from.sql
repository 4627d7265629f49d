-- Moves up to $1 TO_RETRY DLQ rows, in arrival order, back into the outbox as PENDING rows with
-- the same id and 0 attempts, in one statement (so one transaction). An outbox row with the same
-- id is replaced, so the re-drive always takes effect.
WITH clock AS (SELECT clock_timestamp() AS now),
retry AS (
    SELECT id FROM {dlq}
    WHERE dlq_status = 'TO_RETRY'
    ORDER BY moved_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM {dlq} AS d USING retry
    WHERE d.id = retry.id
    RETURNING d.id, d.event_type, d.payload, d.payload_type, d.headers, d.partition_key,
              d.created_at, d.last_error
)
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
)
SELECT moved.id, moved.event_type, moved.payload, moved.payload_type, moved.headers,
       moved.partition_key, 'PENDING', 0, clock.now, NULL, moved.created_at, clock.now, NULL,
       moved.last_error
FROM moved, clock
ON CONFLICT (id) DO UPDATE SET
    event_type = EXCLUDED.event_type, payload = EXCLUDED.payload,
    payload_type = EXCLUDED.payload_type, headers = EXCLUDED.headers,
    partition_key = EXCLUDED.partition_key, status = EXCLUDED.status, attempts = EXCLUDED.attempts,
    next_retry_at = EXCLUDED.next_retry_at, claim_token = EXCLUDED.claim_token,
    created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
    processed_at = EXCLUDED.processed_at, last_error = EXCLUDED.last_error
