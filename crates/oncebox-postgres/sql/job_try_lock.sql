-- Takes the lease on job $1 for owner $3 for $2 microseconds, when the job's row is new or its
-- lease has run out on the database clock. A row changes only when the lease was taken; concurrent
-- callers serialize on the row, and the later ones see the new lease and change nothing.
INSERT INTO {jobs} (name, locked_until, locked_at, locked_by)
SELECT $1, clock.now + $2 * INTERVAL '1 microsecond', clock.now, $3
FROM (SELECT clock_timestamp() AS now) AS clock
ON CONFLICT (name) DO UPDATE
SET locked_until = EXCLUDED.locked_until, locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by
WHERE {jobs}.locked_until <= EXCLUDED.locked_at
