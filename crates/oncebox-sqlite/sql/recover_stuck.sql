-- Returns up to ?2 rows claimed before the cut-off (now shifted by modifier ?1) to PENDING,
-- oldest first, without counting an attempt.
UPDATE {events}
SET status = 'PENDING', claim_token = NULL, updated_at = {now}
WHERE id IN (
    SELECT id FROM {events}
    WHERE status = 'IN_PROCESS' AND updated_at <= strftime({ts}, 'now', ?1)
    ORDER BY updated_at, id
    LIMIT ?2
)
