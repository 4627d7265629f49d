-- One row per event, bound as arrays and sent in one round trip: all PENDING and due at the
-- statement's time. `recoveries` takes its default, so a table from before that column still
-- takes events until create_schema adds it.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
) VALUES (
    :id, :event_type, :payload, :payload_type, :headers, :partition_key, 'PENDING', 0,
    SYS_EXTRACT_UTC(SYSTIMESTAMP), SYS_EXTRACT_UTC(SYSTIMESTAMP), SYS_EXTRACT_UTC(SYSTIMESTAMP)
)
