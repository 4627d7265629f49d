-- Locks due PENDING rows of one type, oldest next_retry_at first, skipping rows another claimer
-- holds. The cursor has no row limit on purpose: Oracle refuses FETCH FIRST with FOR UPDATE
-- (ORA-02014), and a top-N subquery under an outer FOR UPDATE SKIP LOCKED makes every poller
-- compute the same N rows, so concurrent instances wait on each other and get empty batches.
-- SKIP LOCKED locks a row when it is fetched, and the claim fetches only as many as it wants.
-- claimed_at is the one database time stamped on every claimed row. The driver binds text as
-- NVARCHAR2; the CAST keeps the comparison on the VARCHAR2 column, so the claim index drives it
-- (the other look-ups by type, consumer and job name cast the same way).
SELECT id, event_type, payload, payload_type, headers, partition_key, status, attempts,
       next_retry_at, claim_token, created_at, updated_at, processed_at, last_error,
       SYS_EXTRACT_UTC(SYSTIMESTAMP) AS claimed_at
FROM {events}
WHERE event_type = CAST(:event_type AS VARCHAR2(255 CHAR)) AND status = 'PENDING'
  AND next_retry_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
ORDER BY next_retry_at, id
FOR UPDATE SKIP LOCKED
