-- Variant A's business row.
INSERT INTO {prefix}orders (id, customer, amount) VALUES ($1, $2, $3)
