-- Marks a claim applied, only while its token still holds it.
UPDATE {consumed}
SET status = 'PROCESSED', claim_token = NULL, locked_at = NULL, consumed_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND status = 'PROCESSING'
  AND claim_token = :claim_token
