DELETE FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND id IN ({ids})
