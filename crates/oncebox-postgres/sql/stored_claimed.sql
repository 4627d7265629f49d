-- The messages of consumer $1 claimed under token $2, oldest available_at first.
SELECT consumer, id, event_type, payload_type, payload, headers, source, correlation_id, created_at,
       status, attempts, received_at, available_at, processed_at, last_error, claim_token, locked_at
FROM {inbox}
WHERE consumer = $1 AND claim_token = $2 AND status = 'PROCESSING'
ORDER BY available_at, id
