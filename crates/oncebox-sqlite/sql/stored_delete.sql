-- Deletes up to ?3 PROCESSED messages of consumer ?1 processed before the cut-off (now shifted by
-- modifier ?2), oldest first.
DELETE FROM {inbox}
WHERE consumer = ?1 AND id IN (
    SELECT id FROM {inbox}
    WHERE consumer = ?1 AND status = 'PROCESSED' AND processed_at <= strftime({ts}, 'now', ?2)
    ORDER BY processed_at
    LIMIT ?3
)
