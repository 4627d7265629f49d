-- Deletes up to $2 PROCESSED rows last updated more than $1 microseconds ago, oldest first.
WITH old AS (
    SELECT id FROM {events}
    WHERE status = 'PROCESSED'
      AND updated_at <= (SELECT clock_timestamp()) - $1 * INTERVAL '1 microsecond'
    ORDER BY updated_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {events} AS e USING old WHERE e.id = old.id
