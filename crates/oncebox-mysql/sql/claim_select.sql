-- Locks due PENDING rows of type ?1 (at most ?2), oldest next_retry_at first, skipping rows another
-- claimer holds. FORCE INDEX keeps the scan on the claim index in claim order: with a sort step
-- InnoDB would lock every due row before LIMIT applies, and other instances would find nothing.
-- claimed_at is the one database time stamped on every claimed row.
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       UTC_TIMESTAMP(6) AS claimed_at
FROM {events} FORCE INDEX ({prefix}outbox_events_claim)
WHERE event_type = ?1 AND status = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6)
ORDER BY next_retry_at, id
LIMIT ?2
FOR UPDATE SKIP LOCKED
