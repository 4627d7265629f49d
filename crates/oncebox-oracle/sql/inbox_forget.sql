DELETE FROM {consumed} WHERE consumer = CAST(:consumer AS VARCHAR2(255 CHAR)) AND id = :id
