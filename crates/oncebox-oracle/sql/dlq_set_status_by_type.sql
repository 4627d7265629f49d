UPDATE {dlq} SET dlq_status = :dlq_status, updated_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE dlq_status <> 'IN_PROCESS' AND event_type = CAST(:event_type AS VARCHAR2(255 CHAR))
