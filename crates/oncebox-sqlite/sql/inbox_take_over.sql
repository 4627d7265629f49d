-- Takes over a claim in flight since before the cut-off (now shifted by modifier ?4, the lease):
-- its holder crashed or stalled. The record is made anew (consumed_at too, so clean-up does not
-- delete it mid-effect). The new token ?3 fences the old holder's late finish or release.
UPDATE {consumed}
SET claim_token = ?3, locked_at = {now}, consumed_at = {now}
WHERE consumer = ?1 AND id = ?2 AND status = 'PROCESSING'
  AND locked_at <= strftime({ts}, 'now', ?4)
