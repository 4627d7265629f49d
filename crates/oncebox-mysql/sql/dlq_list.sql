-- Rows matching the optional DLQ status (?1) and event type (?2), ?3 rows after skipping ?4.
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       dlq_status, moved_at
FROM {dlq}
WHERE (?1 IS NULL OR dlq_status = ?1) AND (?2 IS NULL OR event_type = ?2)
ORDER BY moved_at, id
LIMIT ?3 OFFSET ?4
