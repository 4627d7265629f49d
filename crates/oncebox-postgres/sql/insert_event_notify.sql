-- insert_event.sql plus the wake-up NOTIFY of its event type on channel $7, in the same
-- statement. NOTIFY is transactional: listeners hear it only if the caller's transaction commits.
WITH inserted AS (
    INSERT INTO {events} (
        id, event_type, payload, payload_type, headers, partition_key, status, attempts,
        next_retry_at, created_at, updated_at
    )
    SELECT $1::uuid, $2::text, $3::text, $4::text, $5::text::jsonb, $6::text, 'PENDING', 0,
           clock.now, clock.now, clock.now
    FROM (SELECT clock_timestamp() AS now) AS clock
)
SELECT pg_notify($7, $2::text)::text AS notified
