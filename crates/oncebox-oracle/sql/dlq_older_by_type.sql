-- Of the rows of one event type that are not IN_PROCESS (those a status change would touch), how
-- many were written more than the threshold ago, when the oldest of them was written (NULL when
-- none) and the database's now, both in UTC; the age is their difference. Reads no payloads.
SELECT COUNT(*) AS row_count, MIN(created_at) AS oldest, SYS_EXTRACT_UTC(SYSTIMESTAMP) AS now_utc
FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND event_type = CAST(:event_type AS VARCHAR2(255 CHAR))
  AND created_at < SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:older_than_micros / 1000000, 'SECOND')
