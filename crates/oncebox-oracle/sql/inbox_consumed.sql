-- Which of the listed ids are recorded for one consumer.
SELECT id FROM {consumed}
WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id IN ({ids})
