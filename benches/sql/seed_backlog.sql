-- Rows $1..=$2 of a backlog written by the server alone, so the measured process never holds it:
-- every $3-th row (none when $3 is 0) carries a payload of $4 bytes, the others 200-byte JSON.
INSERT INTO {events} (
    id, event_type, payload, payload_type, headers, partition_key, status, attempts,
    next_retry_at, created_at, updated_at
)
SELECT gen_random_uuid(), $5,
       CASE WHEN $3::bigint > 0 AND n % $3::bigint = 0
            THEN '{"data":"' || repeat(md5(n::text), (($4::bigint - 11) / 32)::int)
                 || repeat('x', (($4::bigint - 11) % 32)::int) || '"}'
            ELSE '{"order":' || lpad(n::text, 20, '0') || ',"data":"' || repeat('x', 160) || '"}'
       END,
       'BenchPayload', '{}'::jsonb, NULL, 'PENDING', 0, now(), now(), now()
FROM generate_series($1::bigint, $2::bigint) AS n
