INSERT INTO {consumed} (consumer, id, consumed_at) VALUES ($1, $2, clock_timestamp())
ON CONFLICT DO NOTHING
