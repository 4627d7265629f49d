-- Marks the rows locked by the claim's SELECT as claimed by token ? at time ?.
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = ?, updated_at = ?
WHERE id IN ({ids})
