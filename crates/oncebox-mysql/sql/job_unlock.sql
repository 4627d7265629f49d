-- Releases a lease, keeping it until acquisition plus ? microseconds, on job ? held by owner ?.
UPDATE {jobs}
SET locked_until = GREATEST(UTC_TIMESTAMP(6), locked_at + INTERVAL ? MICROSECOND)
WHERE name = ? AND locked_by = ?
