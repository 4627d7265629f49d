-- Gives up on a claimed row that cannot be decoded: failure text ?1, row id ?2, claim token ?3.
-- Sending it is impossible, and leaving it PENDING would fail every claim that reaches it. No
-- attempt is counted, since nothing was sent.
UPDATE {events}
SET status = 'FAILED', last_error = ?1, updated_at = UTC_TIMESTAMP(6), claim_token = NULL
WHERE id = ?2 AND status = 'IN_PROCESS' AND claim_token = ?3
