-- Returns up to ?2 rows claimed before the cut-off (now shifted by modifier ?1) to PENDING,
-- oldest first, without counting an attempt, and counts the recovery instead. The recovery that
-- brings a row to ?3 (max-recoveries) makes it FAILED: its event crashed or stalled every worker
-- that sent it.
UPDATE {events}
SET status = CASE WHEN recoveries + 1 >= ?3 THEN 'FAILED' ELSE 'PENDING' END,
    last_error = CASE WHEN recoveries + 1 >= ?3
                      THEN 'recovered ' || (recoveries + 1) || ' times after its worker stalled or '
                           || 'crashed, never with an outcome (stuck-recovery.max-recoveries): the '
                           || 'event may crash or stall every worker that sends it'
                      ELSE last_error END,
    recoveries = recoveries + 1,
    claim_token = NULL,
    updated_at = {now}
WHERE id IN (
    SELECT id FROM {events}
    WHERE status = 'IN_PROCESS' AND updated_at <= strftime({ts}, 'now', ?1)
    ORDER BY updated_at, id
    LIMIT ?2
)
