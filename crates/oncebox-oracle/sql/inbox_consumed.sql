-- Which of the listed ids are recorded for one consumer.
SELECT id FROM {consumed}
WHERE consumer = :consumer AND id IN ({ids})
