-- Locks TO_RETRY rows, in arrival order, for the move back to the outbox.
SELECT id
FROM {dlq}
WHERE dlq_status = 'TO_RETRY'
ORDER BY moved_at, id
FOR UPDATE SKIP LOCKED
