-- One event, PENDING and due now: the single-publish form of insert_events.sql, with scalar
-- parameters instead of arrays, which PostgreSQL plans and executes with less work than UNNEST.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
)
SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text::jsonb, $6::text, 'PENDING', 0, clock.now, clock.now, clock.now
FROM (SELECT clock_timestamp() AS now) AS clock
