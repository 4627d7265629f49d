-- Marks the rows locked by the claim's SELECT as claimed by token ?1 at time ?2. The status is
-- re-checked, as in every claim, recovery and settle. Here it never leaves a locked row out:
-- InnoDB's locking read returns each row as last committed, and the claim sends every row it
-- locked.
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = ?1, updated_at = ?2
WHERE id IN (?3) AND status = 'PENDING'
