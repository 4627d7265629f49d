-- The messages of one consumer claimed under one token, oldest available_at first.
SELECT consumer, id, event_type, payload_type, payload, headers, source, correlation_id, created_at,
       status, attempts, received_at, available_at, processed_at, last_error, claim_token, locked_at
FROM {inbox}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND claim_token = :claim_token
  AND status = 'PROCESSING'
ORDER BY available_at, id
