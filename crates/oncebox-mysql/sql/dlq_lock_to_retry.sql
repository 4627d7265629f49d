-- Locks up to ?1 TO_RETRY rows, in arrival order, for the move back to the outbox.
SELECT id
FROM {dlq} FORCE INDEX ({prefix}outbox_dlq_events_by_moved_at)
WHERE dlq_status = 'TO_RETRY'
ORDER BY moved_at, id
LIMIT ?1
FOR UPDATE SKIP LOCKED
