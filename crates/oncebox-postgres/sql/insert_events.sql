-- Inserts a whole batch in one statement: row i is ($1[i], …, $6[i]), PENDING and due now.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
)
SELECT batch.id, batch.event_type, batch.payload, batch.payload_type, batch.headers::jsonb, batch.partition_key,
       'PENDING', 0, clock.now, clock.now, clock.now
FROM (SELECT clock_timestamp() AS now) AS clock,
     UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
         AS batch (id, event_type, payload, payload_type, headers, partition_key)
