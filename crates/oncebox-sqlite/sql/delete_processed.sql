-- Deletes up to ?2 PROCESSED rows last updated before the cut-off (now shifted by modifier ?1).
DELETE FROM {events}
WHERE id IN (
    SELECT id FROM {events}
    WHERE status = 'PROCESSED' AND updated_at <= strftime({ts}, 'now', ?1)
    ORDER BY updated_at, id
    LIMIT ?2
)
