-- Makes the messages the claim's cursor locked PROCESSING under the claim's token from now. The
-- cursor read its rows as of its open and locks each only when fetching it, so a row claimed and
-- settled in between (retried with a delay, processed, failed) may be locked yet no longer due
-- and RECEIVED: the update re-checks and leaves such a row as it is, and the claim reads back only
-- the rows that now hold its token (stored_claimed.sql).
UPDATE {inbox}
SET status = 'PROCESSING', claim_token = :claim_token, locked_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id IN ({ids}) AND status = 'RECEIVED'
  AND available_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
