-- Returns up to $2 rows claimed more than $1 microseconds ago to PENDING, oldest first, without
-- counting an attempt. Rows a worker is settling right now are locked and skipped.
WITH clock AS (SELECT clock_timestamp() AS now),
stuck AS (
    SELECT id FROM {events}
    WHERE status = 'IN_PROCESS'
      AND updated_at <= (SELECT now FROM clock) - $1 * INTERVAL '1 microsecond'
    ORDER BY updated_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {events} AS e
SET status = 'PENDING', claim_token = NULL, updated_at = (SELECT now FROM clock)
FROM stuck
WHERE e.id = stuck.id
