-- Settles a claimed message PROCESSED, only while its token still holds it: no row when its lease
-- ran out and another claim took it over. Also run in a transactional handler's transaction.
UPDATE {inbox}
SET status = 'PROCESSED', processed_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), available_at = NULL,
    claim_token = NULL, locked_at = NULL
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND claim_token = :claim_token
  AND status = 'PROCESSING'
