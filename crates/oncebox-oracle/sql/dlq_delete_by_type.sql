DELETE FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND event_type = CAST(:event_type AS VARCHAR2(255 CHAR))
