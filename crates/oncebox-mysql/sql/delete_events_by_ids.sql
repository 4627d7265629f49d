DELETE FROM {events} WHERE id IN (?1)
