-- Claims up to $2 due PENDING rows of type $1 for token $3, oldest next_retry_at first, in one
-- statement: the row locks last only as long as the statement, and rows locked by a concurrent
-- claimer are skipped instead of waited for. The clock is read once (an InitPlan), so it can bound
-- the partial index scan and every claimed row gets the same updated_at. The UPDATE re-checks the
-- status, as every claim, recovery and settle does. Here it never leaves a locked row out:
-- PostgreSQL re-checks the CTE's conditions on the row version it locks.
WITH clock AS (SELECT clock_timestamp() AS now),
due AS (
    SELECT id FROM {events}
    WHERE event_type = $1 AND status = 'PENDING' AND next_retry_at <= (SELECT now FROM clock)
    ORDER BY next_retry_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {events} AS e
SET status = 'IN_PROCESS', claim_token = $3, updated_at = (SELECT now FROM clock)
FROM due
WHERE e.id = due.id AND e.status = 'PENDING'
RETURNING e.id, e.event_type, e.payload, e.payload_type, e.headers, e.partition_key, e.status,
          e.attempts, e.next_retry_at, e.claim_token, e.created_at, e.updated_at, e.processed_at,
          e.last_error
