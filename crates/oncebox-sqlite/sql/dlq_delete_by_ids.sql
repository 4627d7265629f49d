DELETE FROM {dlq}
WHERE dlq_status <> 'IN_PROCESS' AND id IN (SELECT value FROM json_each(?1))
