-- Variant B: the outbox row written by hand, the same columns and values the PgWriter writes.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
) VALUES ($1, $2, $3, $4, '{}'::jsonb, NULL, 'PENDING', 0, now(), now(), now())
