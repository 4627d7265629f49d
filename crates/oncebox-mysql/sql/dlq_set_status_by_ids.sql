UPDATE {dlq} SET dlq_status = ?1, updated_at = UTC_TIMESTAMP(6)
WHERE dlq_status <> 'IN_PROCESS' AND id IN (?2)
