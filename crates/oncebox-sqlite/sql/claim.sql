-- Marks up to ?3 due PENDING rows of type ?2 as claimed by token ?1, oldest next_retry_at first.
-- Runs inside BEGIN IMMEDIATE, so no other writer can claim the same rows in between.
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = ?1, updated_at = {now}
WHERE id IN (
    SELECT id FROM {events}
    WHERE event_type = ?2 AND status = 'PENDING' AND next_retry_at <= {now}
    ORDER BY next_retry_at, id
    LIMIT ?3
)
RETURNING id, event_type, payload, payload_type, headers, partition_key, status, attempts,
          next_retry_at, claim_token, created_at, updated_at, processed_at, last_error
