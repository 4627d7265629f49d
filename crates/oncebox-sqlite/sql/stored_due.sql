-- Up to ?3 due RECEIVED messages of consumer ?1 and type ?2, oldest available_at first. The claim
-- runs in BEGIN IMMEDIATE, so no other writer claims them in between.
SELECT id FROM {inbox}
WHERE consumer = ?1 AND event_type = ?2 AND status = 'RECEIVED' AND available_at <= {now}
ORDER BY available_at, id
LIMIT ?3
