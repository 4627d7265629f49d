-- Schedules row ?1 for another attempt at now shifted by modifier ?3, if it still holds claim ?2.
-- Every outcome (this one, settle_processed.sql's, settle_failed.sql's) ends a run of stalls:
-- `recoveries` (recoveries since the row's last outcome) starts again at 0, so only consecutive
-- stalls reach max-recoveries, not stalls spread over a long life of retries.
UPDATE {events}
SET status = 'PENDING', attempts = attempts + 1, next_retry_at = strftime({ts}, 'now', ?3),
    last_error = ?4, updated_at = {now}, claim_token = NULL, recoveries = 0
WHERE id = ?1 AND status = 'IN_PROCESS' AND claim_token = ?2
