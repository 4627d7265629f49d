-- Prepares PostgreSQL for the shop outbox connector (deploy/debezium/shop-outbox-connector.json).
-- Run it once, as a superuser, in the shop database, after orders-service has created its tables
-- and before the connector is registered. docs/cdc.md explains the order of the steps.
--
--   psql -U postgres -d shop -v ON_ERROR_STOP=1 -f deploy/debezium/setup.sql

-- 1. The publication first. pgoutput reads publication membership as of each change it decodes,
--    so a slot made before its publication cannot decode the changes between the two.
--    Inserts only: the relay's claims and settles (UPDATE) and the clean-up (DELETE) never reach
--    the connector, so the outbox event router sees nothing but new events.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'oncebox_outbox') THEN
        CREATE PUBLICATION oncebox_outbox FOR TABLE public.shop_outbox_events WITH (publish = 'insert');
    END IF;
END
$$;

-- 2. The slot. Creating it waits for the write transactions already running to finish; from the
--    point it returns, PostgreSQL keeps every change for the connector, so an event committed
--    afterwards is published by the connector even if the connector is registered later
--    (snapshot.mode no_data streams from the slot's start).
SELECT slot_name, lsn
FROM pg_create_logical_replication_slot('oncebox_outbox', 'pgoutput')
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = 'oncebox_outbox');

-- 3. The cut-over time T0, read after the slot exists. An outbox row whose created_at is at or
--    after T0 was inserted after the slot existed, so the connector has it; only rows created
--    before T0 may need the relay (docs/cdc.md). Write it down: a second run prints a later time.
SELECT clock_timestamp() AS t0;

-- What the slot holds back: retained WAL grows while the connector is away.
SELECT slot_name, active, confirmed_flush_lsn,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained_wal
FROM pg_replication_slots
WHERE slot_name = 'oncebox_outbox';
