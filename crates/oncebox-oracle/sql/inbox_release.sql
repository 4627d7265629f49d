-- Removes a claim whose effect failed, only while its token still holds it, so the next delivery
-- claims it anew.
DELETE FROM {consumed}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND status = 'PROCESSING'
  AND claim_token = :claim_token
