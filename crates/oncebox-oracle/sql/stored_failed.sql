-- Settles a run that gives the message up: FAILED, one attempt more, never due again, the error
-- kept; only while the claim's token still holds the message.
UPDATE {inbox}
SET status = 'FAILED', attempts = attempts + 1, available_at = NULL, last_error = :last_error,
    claim_token = NULL, locked_at = NULL
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND claim_token = :claim_token
  AND status = 'PROCESSING'
