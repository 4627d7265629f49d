-- Removes DLQ rows with the ids about to arrive again: the event failed once more, and the newest
-- failure is the one to look at. Also removes rows moved back to the outbox.
DELETE FROM {dlq} WHERE id IN ({ids})
