-- The hand-written claim of the raw ceiling: what a relay written by hand against the same table
-- would run. Due PENDING rows of type $1, oldest first, at most $2, for token $3.
WITH due AS (
    SELECT id FROM {events}
    WHERE event_type = $1 AND status = 'PENDING' AND next_retry_at <= now()
    ORDER BY next_retry_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {events} AS e
SET status = 'IN_PROCESS', claim_token = $3, updated_at = now()
FROM due
WHERE e.id = due.id
RETURNING e.id, e.payload, e.payload_type, e.headers::text AS headers, e.partition_key, e.created_at
