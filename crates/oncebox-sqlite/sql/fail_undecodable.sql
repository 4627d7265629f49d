-- Gives up on claimed row ?1 of claim ?2 because it cannot be decoded (?3 says which column and
-- why): sending it is impossible, and leaving it PENDING would fail every claim that reaches it.
-- No attempt is counted, since nothing was sent.
UPDATE {events}
SET status = 'FAILED', last_error = ?3, updated_at = {now}, claim_token = NULL
WHERE id = ?1 AND status = 'IN_PROCESS' AND claim_token = ?2
