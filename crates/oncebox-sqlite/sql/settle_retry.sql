-- Schedules row ?1 for another attempt at now shifted by modifier ?3, if it still holds claim ?2.
UPDATE {events}
SET status = 'PENDING', attempts = attempts + 1, next_retry_at = strftime({ts}, 'now', ?3),
    last_error = ?4, updated_at = {now}, claim_token = NULL
WHERE id = ?1 AND status = 'IN_PROCESS' AND claim_token = ?2
