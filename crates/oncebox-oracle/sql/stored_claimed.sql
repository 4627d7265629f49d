-- The listed messages of one consumer that its claim under one token took (read by primary key: a
-- token has no index).
SELECT consumer, id, event_type, payload_type, payload, headers, source, correlation_id, created_at,
       status, attempts, received_at, available_at, processed_at, last_error, claim_token, locked_at
FROM {inbox}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id IN ({ids}) AND claim_token = :claim_token
  AND status = 'PROCESSING'
