-- One multi-row insert: {rows} repeats the row below once per event, all PENDING and due at the
-- statement's time.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
) VALUES {rows}
