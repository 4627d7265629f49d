-- Which of the rows the claim's cursor locked its update really took: those holding its token.
-- Run only when the update changed fewer rows than the cursor locked.
SELECT id
FROM {events}
WHERE id IN ({ids}) AND claim_token = :claim_token
