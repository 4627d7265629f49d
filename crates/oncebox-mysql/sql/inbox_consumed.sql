-- Which of the listed ids are recorded for consumer ?.
SELECT id FROM {consumed}
WHERE consumer = ? AND id IN ({ids})
