-- Settles one row of a batch (bound as an array, one element per settlement): delivered rows
-- become PROCESSED, retries PENDING after their delay, failures FAILED. Only a row still
-- IN_PROCESS under the batch's claim token changes; the others are counted as refused. Every
-- outcome ends a run of stalls: `recoveries` (recoveries since the row's last outcome) starts
-- again at 0 whether the row is delivered, retried or failed, so only consecutive stalls reach
-- max-recoveries, not stalls spread over a long life of retries.
UPDATE {events}
SET status = :status,
    attempts = attempts + 1,
    next_retry_at = CASE WHEN :status = 'PENDING'
                         THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:delay_micros / 1000000, 'SECOND')
                         ELSE next_retry_at END,
    processed_at = CASE WHEN :status = 'PROCESSED' THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) ELSE processed_at END,
    last_error = :last_error,
    updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    claim_token = NULL,
    recoveries = 0
WHERE id = :id AND status = 'IN_PROCESS' AND claim_token = :claim_token
