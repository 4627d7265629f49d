-- Marks the rows the claim's cursor locked as claimed by one token at the claim's time.
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = :claim_token, updated_at = :claimed_at
WHERE id IN ({ids})
