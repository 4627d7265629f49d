-- Settles a failed run: RECEIVED again, due :after_micros from now, one attempt more, the error
-- kept; only while the claim's token still holds the message. Every SET expression reads the row
-- as it was.
UPDATE {inbox}
SET status = 'RECEIVED', attempts = attempts + 1,
    available_at = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:after_micros / 1000000, 'SECOND'),
    last_error = :last_error, claim_token = NULL, locked_at = NULL
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND claim_token = :claim_token
  AND status = 'PROCESSING'
