-- Stores a message for consumer ?1 as RECEIVED, due now. A plain insert, like inbox_record: only
-- the duplicate-key error means "already there" (a redelivered id), whatever the row's status.
INSERT INTO {inbox} (consumer, id, event_type, payload_type, payload, headers, source, correlation_id,
                     created_at, status, attempts, received_at, available_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'RECEIVED', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
