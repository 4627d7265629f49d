-- Releases a lease, keeping it until acquisition plus ?3 microseconds, on job ?1 held by owner ?2.
UPDATE {jobs}
SET locked_until = GREATEST(UTC_TIMESTAMP(6), locked_at + INTERVAL ?3 MICROSECOND)
WHERE name = ?1 AND locked_by = ?2
