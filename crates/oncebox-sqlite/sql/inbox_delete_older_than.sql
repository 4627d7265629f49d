-- Deletes up to ?2 records made before the cut-off (now shifted by modifier ?1), oldest first.
DELETE FROM {consumed}
WHERE (consumer, id) IN (
    SELECT consumer, id FROM {consumed}
    WHERE consumed_at <= strftime({ts}, 'now', ?1)
    ORDER BY consumed_at
    LIMIT ?2
)
