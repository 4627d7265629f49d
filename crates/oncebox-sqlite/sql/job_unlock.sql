-- Releases owner ?2's lease on job ?1, but keeps it until acquisition shifted by modifier ?3.
UPDATE {jobs}
SET locked_until = max({now}, strftime({ts}, locked_at, ?3))
WHERE name = ?1 AND locked_by = ?2
