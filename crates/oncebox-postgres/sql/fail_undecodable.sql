-- Gives up on claimed rows that cannot be decoded: row i of the arrays is (id $2[i], failure text
-- $3[i] naming the column and why). Sending them is impossible, and leaving them PENDING would
-- fail every claim that reaches them. No attempt is counted, since nothing was sent. Only rows
-- still IN_PROCESS under claim token $1 change.
WITH clock AS (SELECT clock_timestamp() AS now),
undecodable AS (
    SELECT * FROM UNNEST($2::uuid[], $3::text[]) AS undecodable (id, error)
)
UPDATE {events} AS e
SET status = 'FAILED', last_error = undecodable.error, updated_at = clock.now, claim_token = NULL
FROM undecodable, clock
WHERE e.id = undecodable.id AND e.status = 'IN_PROCESS' AND e.claim_token = $1
