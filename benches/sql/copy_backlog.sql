-- Refills the outbox table from the template backlog written once through the PgWriter, so every
-- timed phase starts from the same rows.
INSERT INTO {events} SELECT * FROM {prefix}backlog_outbox_events
