-- Records every id of the JSON array ?2 for consumer ?1 in one statement; returns the new ones.
-- (`WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.)
INSERT INTO {consumed} (consumer, id, consumed_at)
SELECT ?1, value, {now} FROM json_each(?2) WHERE true
ON CONFLICT DO NOTHING
RETURNING id
