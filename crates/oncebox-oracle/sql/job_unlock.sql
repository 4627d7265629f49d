-- Releases a lease, keeping it until acquisition plus the at-least time.
UPDATE {jobs}
SET locked_until = GREATEST(SYS_EXTRACT_UTC(SYSTIMESTAMP),
                            locked_at + NUMTODSINTERVAL(:at_least_micros / 1000000, 'SECOND'))
WHERE name = CAST(:name AS VARCHAR2(255 CHAR)) AND locked_by = :owner
