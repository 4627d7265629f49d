-- Per event type with PENDING rows, when the oldest of them was written and the database's now,
-- both in UTC; the age is their difference. Reads PENDING rows only.
SELECT event_type, MIN(created_at) AS oldest, SYS_EXTRACT_UTC(SYSTIMESTAMP) AS now_utc
FROM {events}
WHERE status = 'PENDING'
GROUP BY event_type
ORDER BY event_type
