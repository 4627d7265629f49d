-- Takes a lease of ?2 microseconds for owner ?3 on job ?1, when its current lease has run out on the
-- database clock. The row lock serializes concurrent callers; the later ones no longer match. A job
-- with no row yet is inserted by job_insert.sql (an upsert cannot tell "taken" from "unchanged"
-- under CLIENT_FOUND_ROWS).
UPDATE {jobs}
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ?2 MICROSECOND, locked_at = UTC_TIMESTAMP(6), locked_by = ?3
WHERE name = ?1 AND locked_until <= UTC_TIMESTAMP(6)
