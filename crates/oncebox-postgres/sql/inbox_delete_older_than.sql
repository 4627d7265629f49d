-- Deletes up to $2 records made more than $1 microseconds ago, oldest first, over all consumers.
WITH old AS (
    SELECT consumer, id FROM {consumed}
    WHERE consumed_at <= (SELECT clock_timestamp()) - $1 * INTERVAL '1 microsecond'
    ORDER BY consumed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {consumed} AS c USING old WHERE c.consumer = old.consumer AND c.id = old.id
