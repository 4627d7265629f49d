INSERT INTO {consumed} (consumer, id, consumed_at) VALUES (?1, ?2, {now})
ON CONFLICT DO NOTHING
