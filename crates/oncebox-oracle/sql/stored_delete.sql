-- Deletes PROCESSED messages of :consumer processed more than the threshold ago, oldest first and at most
-- :max_rows. A plain top-N subquery is right here, as in delete_processed.sql: clean-up runs under
-- a job lock. The outer status check keeps a row that changed since the subquery read it.
DELETE FROM {inbox}
WHERE rowid IN (
    SELECT rowid FROM {inbox}
    WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND status = 'PROCESSED'
      AND processed_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
    ORDER BY processed_at
    FETCH FIRST :max_rows ROWS ONLY
) AND status = 'PROCESSED'
