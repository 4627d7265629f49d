-- Takes the lease on a job that has no row yet; a duplicate-key error means another instance was
-- first.
INSERT INTO {jobs} (name, locked_until, locked_at, locked_by)
VALUES (?1, UTC_TIMESTAMP(6) + INTERVAL ?2 MICROSECOND, UTC_TIMESTAMP(6), ?3)
