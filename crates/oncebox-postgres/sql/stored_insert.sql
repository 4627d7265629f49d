-- Stores a message for consumer $1 as RECEIVED, due now: one row when it was new. A redelivered id
-- meets the primary key and changes nothing, whatever the stored row's status.
INSERT INTO {inbox} (consumer, id, event_type, payload_type, payload, headers, source, correlation_id,
                     created_at, status, attempts, received_at, available_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, 'RECEIVED', 0, clock_timestamp(), clock_timestamp())
ON CONFLICT DO NOTHING
