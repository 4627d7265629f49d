-- Takes over a claim in flight for longer than the lease: its holder crashed or stalled. The record
-- is made anew (consumed_at too, so clean-up does not delete it mid-effect). The new token fences
-- the old holder's late finish or release.
UPDATE {consumed}
SET claim_token = :claim_token, locked_at = SYS_EXTRACT_UTC(SYSTIMESTAMP), consumed_at = SYS_EXTRACT_UTC(SYSTIMESTAMP)
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id AND status = 'PROCESSING'
  AND locked_at <= SYS_EXTRACT_UTC(SYSTIMESTAMP) - NUMTODSINTERVAL(:lease_micros / 1000000, 'SECOND')
