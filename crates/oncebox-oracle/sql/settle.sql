-- Settles one row of a batch (bound as an array, one element per settlement): delivered rows
-- become PROCESSED, retries PENDING after their delay, failures FAILED. Only a row still
-- IN_PROCESS under the batch's claim token changes; the others are counted as refused.
UPDATE {events}
SET status = :status,
    attempts = attempts + 1,
    next_retry_at = CASE WHEN :status = 'PENDING'
                         THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:delay_micros / 1000000, 'SECOND')
                         ELSE next_retry_at END,
    processed_at = CASE WHEN :status = 'PROCESSED' THEN SYS_EXTRACT_UTC(SYSTIMESTAMP) ELSE processed_at END,
    last_error = :last_error,
    updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    claim_token = NULL
WHERE id = :id AND status = 'IN_PROCESS' AND claim_token = :claim_token
