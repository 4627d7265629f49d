-- Deletes the outbox rows whose ids are in the JSON array ?1.
DELETE FROM {events} WHERE id IN (SELECT value FROM json_each(?1))
