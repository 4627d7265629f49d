-- Takes the lease on job ?1 for owner ?3 until now shifted by modifier ?2, when the job's row is
-- new or its lease has run out. A row changes only when the lease was taken.
INSERT INTO {jobs} (name, locked_until, locked_at, locked_by)
VALUES (?1, strftime({ts}, 'now', ?2), {now}, ?3)
ON CONFLICT (name) DO UPDATE
SET locked_until = excluded.locked_until, locked_at = excluded.locked_at, locked_by = excluded.locked_by
WHERE {jobs}.locked_until <= {now}
