-- Returns the locked rows to PENDING without counting an attempt, and counts the recovery
-- instead. The recovery that brings a row to max-recoveries makes it FAILED: its event crashed
-- or stalled every worker that sent it. Every SET expression reads the row as it was.
UPDATE {events}
SET status = CASE WHEN recoveries + 1 >= :max_recoveries THEN 'FAILED' ELSE 'PENDING' END,
    last_error = CASE WHEN recoveries + 1 >= :max_recoveries
                      THEN 'recovered ' || (recoveries + 1) || ' times after its worker stalled or '
                           || 'crashed, never with an outcome (stuck-recovery.max-recoveries): '
                           || 'the event may crash or stall every worker that sends it'
                      ELSE last_error END,
    claim_token = NULL,
    updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    recoveries = recoveries + 1
WHERE id IN ({ids})
