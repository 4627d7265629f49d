-- Deletes up to $2 PROCESSED messages processed more than $1 microseconds ago, oldest first.
WITH old AS (
    SELECT consumer, id FROM {inbox}
    WHERE status = 'PROCESSED'
      AND processed_at <= (SELECT clock_timestamp()) - $1 * INTERVAL '1 microsecond'
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {inbox} AS m USING old WHERE m.consumer = old.consumer AND m.id = old.id
