-- Claims id ?2 for consumer ?1 under token ?3, in flight from now: one row when it was new.
INSERT INTO {consumed} (consumer, id, consumed_at, status, claim_token, locked_at)
VALUES (?1, ?2, {now}, 'PROCESSING', ?3, {now})
ON CONFLICT DO NOTHING
