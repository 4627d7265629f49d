-- Deletes PROCESSED rows last updated more than the threshold ago, oldest first and at most
-- :max_rows. A plain top-N subquery is right here: clean-up runs under a job lock.
DELETE FROM {events}
WHERE rowid IN (
    SELECT rowid FROM {events}
    WHERE status = 'PROCESSED'
      AND updated_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
    ORDER BY updated_at, id
    FETCH FIRST :max_rows ROWS ONLY
) AND status = 'PROCESSED'
