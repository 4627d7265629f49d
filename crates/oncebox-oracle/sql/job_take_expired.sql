-- Takes the lease of a job whose current lease has run out on the database clock. The row lock
-- serializes concurrent callers; the later ones no longer match.
UPDATE {jobs}
SET locked_until = SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:at_most_micros / 1000000, 'SECOND'),
    locked_at = SYS_EXTRACT_UTC(SYSTIMESTAMP),
    locked_by = :owner
WHERE name = CAST(:name AS VARCHAR2(255 CHAR)) AND locked_until <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
