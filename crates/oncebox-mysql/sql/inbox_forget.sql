DELETE FROM {consumed} WHERE consumer = ? AND id = ?
