-- Deletes up to $2 RESOLVED rows last updated more than $1 microseconds ago, oldest first.
WITH old AS (
    SELECT id FROM {dlq}
    WHERE dlq_status = 'RESOLVED'
      AND updated_at <= (SELECT clock_timestamp()) - $1 * INTERVAL '1 microsecond'
    ORDER BY updated_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {dlq} AS d USING old WHERE d.id = old.id
