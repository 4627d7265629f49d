-- Gives up on a claimed row that cannot be decoded: failure text ?, row id ?, claim token ?.
-- Sending it is impossible, and leaving it PENDING would fail every claim that reaches it. No
-- attempt is counted, since nothing was sent.
UPDATE {events}
SET status = 'FAILED', last_error = ?, updated_at = UTC_TIMESTAMP(6), claim_token = NULL
WHERE id = ? AND status = 'IN_PROCESS' AND claim_token = ?
