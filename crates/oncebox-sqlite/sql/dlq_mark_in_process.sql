-- Marks up to ?1 TO_RETRY rows, in arrival order, as being moved back to the outbox. The mark only
-- exists inside the transfer transaction: the same transaction copies and deletes these rows.
UPDATE {dlq} SET dlq_status = 'IN_PROCESS'
WHERE id IN (
    SELECT id FROM {dlq}
    WHERE dlq_status = 'TO_RETRY'
    ORDER BY moved_at, id
    LIMIT ?1
)
