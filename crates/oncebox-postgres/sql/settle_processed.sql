-- Settles a batch whose every event was delivered, the common case: one id array instead of the
-- four of settle.sql. Only rows still IN_PROCESS under claim token $1 change, so a batch that was
-- recovered and re-claimed by another worker is refused. An outcome restarts the count of
-- recoveries without one (see settle.sql).
WITH clock AS (SELECT clock_timestamp() AS now)
UPDATE {events} AS e
SET status = 'PROCESSED',
    attempts = e.attempts + 1,
    processed_at = clock.now,
    last_error = NULL,
    updated_at = clock.now,
    claim_token = NULL,
    recoveries = 0
FROM clock
WHERE e.id = ANY($2::uuid[]) AND e.status = 'IN_PROCESS' AND e.claim_token = $1
