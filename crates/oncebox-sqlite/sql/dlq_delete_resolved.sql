-- Deletes up to ?2 RESOLVED rows last updated before the cut-off (now shifted by modifier ?1).
DELETE FROM {dlq}
WHERE id IN (
    SELECT id FROM {dlq}
    WHERE dlq_status = 'RESOLVED' AND updated_at <= strftime({ts}, 'now', ?1)
    ORDER BY updated_at, id
    LIMIT ?2
)
