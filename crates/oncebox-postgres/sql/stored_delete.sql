-- Deletes up to $3 PROCESSED messages of consumer $1 processed more than $2 microseconds ago,
-- oldest first.
WITH old AS (
    SELECT consumer, id FROM {inbox}
    WHERE consumer = $1 AND status = 'PROCESSED'
      AND processed_at <= (SELECT clock_timestamp()) - $2 * INTERVAL '1 microsecond'
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {inbox} AS m USING old WHERE m.consumer = old.consumer AND m.id = old.id
