-- Marks the rows the claim's cursor locked as claimed by one token at the claim's time. The
-- cursor read its rows as of its open and locks each only when fetching it, so a row settled in
-- between (retried with a delay, delivered, failed) may be locked yet no longer due and PENDING:
-- the update re-checks, leaves such a row as it is, and the claim then keeps only the rows that
-- now hold its token (claim_taken.sql).
UPDATE {events}
SET status = 'IN_PROCESS', claim_token = :claim_token, updated_at = :claimed_at
WHERE id IN ({ids}) AND status = 'PENDING' AND next_retry_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP)
