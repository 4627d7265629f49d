-- The listed messages of consumer ?1 that its claim under token ?2 took (read by primary key: a
-- token has no index).
SELECT consumer, id, event_type, payload_type, payload, headers, source, correlation_id, created_at,
       status, attempts, received_at, available_at, processed_at, last_error, claim_token, locked_at
FROM {inbox}
WHERE consumer = ?1 AND id IN (?3) AND claim_token = ?2 AND status = 'PROCESSING'
