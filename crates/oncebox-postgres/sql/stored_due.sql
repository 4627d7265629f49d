-- Locks up to $3 due RECEIVED messages of consumer $1 and type $2, oldest available_at first, for
-- the claim's transaction; rows a concurrent claimer locked are skipped, never waited for.
SELECT id FROM {inbox}
WHERE consumer = $1 AND event_type = $2 AND status = 'RECEIVED' AND available_at <= clock_timestamp()
ORDER BY available_at, id
LIMIT $3
FOR UPDATE SKIP LOCKED
