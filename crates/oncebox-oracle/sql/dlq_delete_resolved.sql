-- Deletes RESOLVED rows last updated more than the threshold ago, oldest first and at most
-- :max_rows (under a job lock, so a top-N subquery).
DELETE FROM {dlq}
WHERE rowid IN (
    SELECT rowid FROM {dlq}
    WHERE dlq_status = 'RESOLVED'
      AND updated_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
    ORDER BY updated_at, id
    FETCH FIRST :max_rows ROWS ONLY
) AND dlq_status = 'RESOLVED'
