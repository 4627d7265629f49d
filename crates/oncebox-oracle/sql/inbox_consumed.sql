-- Which of the listed ids are recorded as applied for one consumer (a claim in flight is not).
SELECT id FROM {consumed}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id IN ({ids}) AND status = 'PROCESSED'
