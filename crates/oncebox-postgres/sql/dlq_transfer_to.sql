-- Moves up to $1 FAILED rows, oldest first, from the outbox into the DLQ as MOVED, in one
-- statement (so one transaction): the rows are locked, deleted from the outbox and inserted into
-- the DLQ together. A DLQ row left with the same id is replaced: the event failed again and the
-- newest failure is the one to look at. Returns the rows as they were in the outbox.
WITH failed AS (
    SELECT id FROM {events}
    WHERE status = 'FAILED'
    ORDER BY updated_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM {events} AS e USING failed
    WHERE e.id = failed.id
    RETURNING e.id, e.event_type, e.payload, e.payload_type, e.headers, e.partition_key, e.status,
              e.attempts, e.next_retry_at, e.claim_token, e.created_at, e.updated_at,
              e.processed_at, e.last_error
),
copied AS (
    INSERT INTO {dlq} (
        id, event_type, payload, payload_type, headers, partition_key, status, attempts,
        next_retry_at, claim_token, created_at, updated_at, processed_at, last_error, dlq_status,
        moved_at
    )
    SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
           next_retry_at, claim_token, created_at, updated_at, processed_at, last_error, 'MOVED',
           (SELECT clock_timestamp())
    FROM moved
    ON CONFLICT (id) DO UPDATE SET
        event_type = EXCLUDED.event_type, payload = EXCLUDED.payload,
        payload_type = EXCLUDED.payload_type, headers = EXCLUDED.headers,
        partition_key = EXCLUDED.partition_key, status = EXCLUDED.status,
        attempts = EXCLUDED.attempts, next_retry_at = EXCLUDED.next_retry_at,
        claim_token = EXCLUDED.claim_token, created_at = EXCLUDED.created_at,
        updated_at = EXCLUDED.updated_at, processed_at = EXCLUDED.processed_at,
        last_error = EXCLUDED.last_error, dlq_status = EXCLUDED.dlq_status,
        moved_at = EXCLUDED.moved_at
)
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
FROM moved
