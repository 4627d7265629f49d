-- Stores a message for a consumer as RECEIVED, due now. A plain insert, like inbox_record.sql:
-- only a unique-constraint error (ORA-00001) means "already there" (a redelivered id), whatever
-- the stored row's status. The payload is bound as a BLOB and the headers as a CLOB, so neither
-- stops at a VARCHAR2 bind's size.
INSERT INTO {inbox} (
    consumer, id, event_type, payload_type, payload, headers, source, correlation_id, created_at,
    status, attempts, received_at, available_at
) VALUES (
    :consumer, :id, :event_type, :payload_type, :payload, :headers, :source, :correlation_id, :created_at,
    'RECEIVED', 0, SYS_EXTRACT_UTC(SYSTIMESTAMP), SYS_EXTRACT_UTC(SYSTIMESTAMP)
)
