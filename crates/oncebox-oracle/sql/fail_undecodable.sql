-- Gives up on a claimed row that cannot be decoded. Sending it is impossible, and leaving it
-- PENDING would fail every claim that reaches it. No attempt is counted, since nothing was sent.
UPDATE {events}
SET status = 'FAILED', last_error = :last_error, updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    claim_token = NULL
WHERE id = :id AND status = 'IN_PROCESS' AND claim_token = :claim_token
