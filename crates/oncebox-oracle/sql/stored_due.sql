-- Locks due RECEIVED messages of one consumer and type, oldest available_at first, skipping rows
-- a concurrent claimer holds. As claim_lock.sql, the cursor has no row limit (Oracle refuses
-- FETCH FIRST with FOR UPDATE, ORA-02014, and a top-N subquery would make every poller compute
-- the same rows): SKIP LOCKED locks a row when it is fetched, and the claim fetches only its
-- batch. The CASTs keep the comparisons on the VARCHAR2 columns, so the due index drives it.
SELECT id
FROM {inbox}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR))
  AND event_type = CAST(:event_type AS VARCHAR2(255 CHAR))
  AND status = 'RECEIVED'
  AND available_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
ORDER BY available_at, id
FOR UPDATE SKIP LOCKED
