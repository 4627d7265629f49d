INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
)
VALUES
