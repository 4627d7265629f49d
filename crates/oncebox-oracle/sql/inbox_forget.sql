DELETE FROM {consumed} WHERE consumer = :consumer AND id = :id
