-- Takes over a claim in flight for longer than the lease (?4 microseconds): its holder crashed or
-- stalled. The record is made anew (consumed_at too, so clean-up does not delete it mid-effect).
-- The new token ?3 fences the old holder's late finish or release.
UPDATE {consumed}
SET claim_token = ?3, locked_at = UTC_TIMESTAMP(6), consumed_at = UTC_TIMESTAMP(6)
WHERE consumer = ?1 AND id = ?2 AND status = 'PROCESSING'
  AND locked_at <= UTC_TIMESTAMP(6) - INTERVAL ?4 MICROSECOND
