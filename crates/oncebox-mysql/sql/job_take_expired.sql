-- Takes a lease of ? microseconds for owner ? on job ?, when its current lease has run out on the
-- database clock. The row lock serializes concurrent callers; the later ones no longer match.
UPDATE {jobs}
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, locked_at = UTC_TIMESTAMP(6), locked_by = ?
WHERE name = ? AND locked_until <= UTC_TIMESTAMP(6)
