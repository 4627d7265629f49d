-- Returns up to $2 rows claimed more than $1 microseconds ago to PENDING, oldest first, without
-- counting an attempt, and counts the recovery instead. The recovery that brings a row to $3
-- (max-recoveries) makes it FAILED: its event crashed or stalled every worker that sent it. Rows
-- a worker is settling right now are locked and skipped. The UPDATE re-checks the status, as
-- every claim, recovery and settle does, so it never turns a settled row back to PENDING or
-- FAILED (the CTE's lock re-checked it already).
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
SET status = CASE WHEN e.recoveries + 1 >= $3 THEN 'FAILED' ELSE 'PENDING' END,
    last_error = CASE WHEN e.recoveries + 1 >= $3
                      THEN 'recovered ' || (e.recoveries + 1) || ' times after its worker stalled or '
                           || 'crashed, never with an outcome (stuck-recovery.max-recoveries): the '
                           || 'event may crash or stall every worker that sends it'
                      ELSE e.last_error END,
    recoveries = e.recoveries + 1,
    claim_token = NULL,
    updated_at = (SELECT now FROM clock)
FROM stuck
WHERE e.id = stuck.id AND e.status = 'IN_PROCESS'
