-- Records every id of $2 for consumer $1 in one statement; returns the new ones. DISTINCT keeps a
-- duplicate inside the input from being inserted twice.
INSERT INTO {consumed} (consumer, id, consumed_at)
SELECT $1, ids.id, clock_timestamp() FROM (SELECT DISTINCT id FROM UNNEST($2::uuid[]) AS u (id)) AS ids
ON CONFLICT DO NOTHING
RETURNING id
