-- Deletes records made more than the threshold ago, oldest first and at most :max_rows, over all
-- consumers.
DELETE FROM {consumed}
WHERE rowid IN (
    SELECT rowid FROM {consumed}
    WHERE consumed_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
    ORDER BY consumed_at
    FETCH FIRST :max_rows ROWS ONLY
)
