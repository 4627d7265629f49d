-- Returns the locked rows to PENDING without counting an attempt, and counts the recovery
-- instead. The recovery that brings a row to max-recoveries makes it FAILED: its event crashed
-- or stalled every worker that sent it. Every SET expression reads the row as it was.
-- The cursor read its rows as of its open and locks each only when fetching it, so a row settled
-- (or settled and claimed again) in between may be locked yet no longer stuck: the update
-- re-checks recover_lock.sql's condition, with the same threshold, and leaves such a row as it
-- is, so a delivered row is never turned back to PENDING or FAILED. Only the rows it changed are
-- counted as recovered.
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
WHERE id IN ({ids}) AND status = 'IN_PROCESS'
  AND updated_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
