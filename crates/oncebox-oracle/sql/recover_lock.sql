-- Locks rows claimed longer ago than the threshold, oldest first, the claim's way (no row limit,
-- the caller fetches what it wants). A row being settled right now is skipped, not waited for.
SELECT id
FROM {events}
WHERE status = 'IN_PROCESS'
  AND updated_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
ORDER BY updated_at, id
FOR UPDATE SKIP LOCKED
