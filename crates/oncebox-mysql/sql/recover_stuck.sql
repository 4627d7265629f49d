-- Returns rows claimed more than ? microseconds ago to PENDING, oldest first and at most ?,
-- without counting an attempt. A row being settled right now is waited for, then no longer matches.
UPDATE {events}
SET status = 'PENDING', claim_token = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE status = 'IN_PROCESS' AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY updated_at, id
LIMIT ?
