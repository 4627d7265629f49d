-- A plain insert: only a duplicate-key error (1062) means "already recorded"; every other problem,
-- truncation included, stays an error. (`INSERT IGNORE` would hide those, and under the
-- CLIENT_FOUND_ROWS flag sqlx connects with, `ON DUPLICATE KEY UPDATE id = id` reports one affected
-- row for a new id and for a duplicate alike.)
INSERT INTO {consumed} (consumer, id, consumed_at) VALUES (?1, ?2, UTC_TIMESTAMP(6))
