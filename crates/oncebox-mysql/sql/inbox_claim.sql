-- Claims id ?2 for consumer ?1 under token ?3, in flight from now. A plain insert, like
-- inbox_record: only the duplicate-key error means "already there".
INSERT INTO {consumed} (consumer, id, consumed_at, status, claim_token, locked_at)
VALUES (?1, ?2, UTC_TIMESTAMP(6), 'PROCESSING', ?3, UTC_TIMESTAMP(6))
