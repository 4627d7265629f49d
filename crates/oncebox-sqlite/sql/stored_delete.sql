-- Deletes up to ?2 PROCESSED messages processed before the cut-off (now shifted by modifier ?1),
-- oldest first.
DELETE FROM {inbox}
WHERE (consumer, id) IN (
    SELECT consumer, id FROM {inbox}
    WHERE status = 'PROCESSED' AND processed_at <= strftime({ts}, 'now', ?1)
    ORDER BY processed_at
    LIMIT ?2
)
