DELETE FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND event_type = :event_type
