-- Settles retries and failures in one statement: {outcomes} is a UNION ALL of
-- (id, status, delay_micros, error) rows, bound first; only rows still IN_PROCESS under the claim
-- token bound last change. Every outcome ends a run of stalls: `recoveries` (recoveries since
-- the row's last outcome) starts again at 0 whether the row is retried or failed, so only
-- consecutive stalls reach max-recoveries, not stalls spread over a long life of retries.
UPDATE {events} AS e
JOIN ({outcomes}) AS outcome ON e.id = outcome.id
SET e.status = outcome.status,
    e.attempts = e.attempts + 1,
    e.next_retry_at = CASE WHEN outcome.status = 'PENDING'
                           THEN UTC_TIMESTAMP(6) + INTERVAL outcome.delay_micros MICROSECOND
                           ELSE e.next_retry_at END,
    e.last_error = outcome.error,
    e.updated_at = UTC_TIMESTAMP(6),
    e.claim_token = NULL,
    e.recoveries = 0
WHERE e.status = 'IN_PROCESS' AND e.claim_token = ?
