-- Takes the lease of a job that has no row yet; ORA-00001 means another instance was first.
INSERT INTO {jobs} (name, locked_until, locked_at, locked_by)
VALUES (:name, SYS_EXTRACT_UTC(SYSTIMESTAMP) + NUMTODSINTERVAL(:at_most_micros / 1000000, 'SECOND'),
        SYS_EXTRACT_UTC(SYSTIMESTAMP), :owner)
