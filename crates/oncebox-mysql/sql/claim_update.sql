-- Marks the rows locked by the claim's SELECT as claimed by token ?1 at time ?2.
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = ?1, updated_at = ?2
WHERE id IN (?3)
