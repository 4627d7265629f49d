-- Settles a whole batch in one statement. Row i of the arrays is (id $2[i], new status $3[i],
-- retry delay in microseconds $4[i], failure text $5[i]); only rows still IN_PROCESS under claim
-- token $1 change, so a batch that was recovered and re-claimed by another worker is refused.
-- Every outcome ends a run of stalls: `recoveries` (recoveries since the row's last outcome)
-- starts again at 0 whether the row is delivered, retried or failed, so only consecutive stalls
-- reach max-recoveries, not stalls spread over a long life of retries.
WITH clock AS (SELECT clock_timestamp() AS now),
outcome AS (
    SELECT * FROM UNNEST($2::uuid[], $3::text[], $4::bigint[], $5::text[])
        AS outcome (id, status, delay_micros, error)
)
UPDATE {events} AS e
SET status = outcome.status,
    attempts = e.attempts + 1,
    next_retry_at = CASE WHEN outcome.status = 'PENDING'
                         THEN clock.now + outcome.delay_micros * INTERVAL '1 microsecond'
                         ELSE e.next_retry_at END,
    processed_at = CASE WHEN outcome.status = 'PROCESSED' THEN clock.now ELSE e.processed_at END,
    last_error = outcome.error,
    updated_at = clock.now,
    claim_token = NULL,
    recoveries = 0
FROM outcome, clock
WHERE e.id = outcome.id AND e.status = 'IN_PROCESS' AND e.claim_token = $1
