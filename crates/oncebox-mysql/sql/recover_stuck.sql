-- Returns rows claimed more than ?1 microseconds ago to PENDING, oldest first and at most ?2,
-- without counting an attempt, and counts the recovery instead. The recovery that brings a row to
-- max-recoveries (?3) makes it FAILED: its event crashed or stalled every worker
-- that sent it. MySQL assigns left to right, each assignment seeing the ones before it, so
-- `recoveries` is incremented last. A row being settled right now is waited for, then no longer
-- matches.
UPDATE {events}
SET status = CASE WHEN recoveries + 1 >= ?3 THEN 'FAILED' ELSE 'PENDING' END,
    last_error = CASE WHEN recoveries + 1 >= ?3
                      THEN CONCAT('recovered ', recoveries + 1, ' times after its worker stalled or ',
                                  'crashed, never with an outcome (stuck-recovery.max-recoveries): ',
                                  'the event may crash or stall every worker that sends it')
                      ELSE last_error END,
    claim_token = NULL,
    updated_at = UTC_TIMESTAMP(6),
    recoveries = recoveries + 1
WHERE status = 'IN_PROCESS' AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ?1 MICROSECOND
ORDER BY updated_at, id
LIMIT ?2
