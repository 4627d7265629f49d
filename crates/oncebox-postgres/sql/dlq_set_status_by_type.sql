UPDATE {dlq} SET dlq_status = $1, updated_at = clock_timestamp()
WHERE dlq_status <> 'IN_PROCESS' AND event_type = $2
