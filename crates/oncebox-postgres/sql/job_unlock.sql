-- Releases owner $2's lease on job $1, but keeps it until acquisition plus $3 microseconds.
UPDATE {jobs}
SET locked_until = GREATEST(clock_timestamp(), locked_at + $3 * INTERVAL '1 microsecond')
WHERE name = $1 AND locked_by = $2
