-- Makes the messages of consumer ?1 listed in the JSON array ?3 PROCESSING under token ?2 from now,
-- re-checking that each is still RECEIVED.
UPDATE {inbox}
SET status = 'PROCESSING', claim_token = ?2, locked_at = {now}
WHERE consumer = ?1 AND id IN (SELECT value FROM json_each(?3)) AND status = 'RECEIVED'
