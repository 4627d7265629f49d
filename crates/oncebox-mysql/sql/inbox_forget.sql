DELETE FROM {consumed} WHERE consumer = ?1 AND id = ?2
