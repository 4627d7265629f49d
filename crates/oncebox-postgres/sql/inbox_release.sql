-- Removes a claim whose effect failed, only while token $3 still holds it, so the next delivery
-- claims it anew.
DELETE FROM {consumed}
WHERE consumer = $1 AND id = $2 AND status = 'PROCESSING' AND claim_token = $3
