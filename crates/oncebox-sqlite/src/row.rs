//! Decoding rows into the core types; a malformed value is a decode error naming table, row and
//! column, never a panic.

use chrono::{DateTime, Utc};
use oncebox_core::event::headers_from_json;
use oncebox_core::{DlqEvent, Error, ErrorKind, OutboxEvent, Result};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use crate::error::database_error;
use crate::time::parse_timestamp;

/// Reads one column of a row of `table` whose id text is `id`.
struct Columns<'r> {
    row: &'r SqliteRow,
    table: &'r str,
    id: String,
}

impl<'r> Columns<'r> {
    fn new(row: &'r SqliteRow, table: &'r str) -> Result<Self> {
        let id =
            row.try_get::<String, _>("id").map_err(|e| database_error(&format!("reading {table}.id"), e))?;
        Ok(Self { row, table, id })
    }

    fn bad(&self, column: &str, problem: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Decode, format!("{}.{column} of row {}: {problem}", self.table, self.id))
    }

    fn text(&self, column: &str) -> Result<String> {
        self.row.try_get::<String, _>(column).map_err(|error| self.bad(column, error))
    }

    fn optional_text(&self, column: &str) -> Result<Option<String>> {
        self.row.try_get::<Option<String>, _>(column).map_err(|error| self.bad(column, error))
    }

    fn uuid_text(&self, column: &str, text: &str) -> Result<Uuid> {
        Uuid::parse_str(text).map_err(|error| self.bad(column, format!("'{text}' is not a UUID ({error})")))
    }

    fn timestamp_text(&self, column: &str, text: &str) -> Result<DateTime<Utc>> {
        parse_timestamp(text)
            .map_err(|error| self.bad(column, format!("'{text}' is not a timestamp ({error})")))
    }

    fn timestamp(&self, column: &str) -> Result<DateTime<Utc>> {
        self.timestamp_text(column, &self.text(column)?)
    }

    fn optional_timestamp(&self, column: &str) -> Result<Option<DateTime<Utc>>> {
        self.optional_text(column)?.map(|text| self.timestamp_text(column, &text)).transpose()
    }

    fn event(&self) -> Result<OutboxEvent> {
        let id = self.uuid_text("id", &self.id)?;
        let status = self.text("status")?;
        let attempts = self.row.try_get::<i64, _>("attempts").map_err(|error| self.bad("attempts", error))?;
        let headers = self.text("headers")?;
        Ok(OutboxEvent {
            id,
            event_type: self.text("event_type")?,
            payload: self.text("payload")?,
            payload_type: self.text("payload_type")?,
            headers: headers_from_json(id, &headers).map_err(|error| error.context(self.table))?,
            partition_key: self.optional_text("partition_key")?,
            status: status.parse().map_err(|_| self.bad("status", format!("unknown status '{status}'")))?,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            next_retry_at: self.timestamp("next_retry_at")?,
            created_at: self.timestamp("created_at")?,
            updated_at: self.timestamp("updated_at")?,
            processed_at: self.optional_timestamp("processed_at")?,
            last_error: self.optional_text("last_error")?,
            claim_token: self
                .optional_text("claim_token")?
                .map(|text| self.uuid_text("claim_token", &text))
                .transpose()?,
        })
    }
}

/// Decodes an outbox row (or the outbox part of a DLQ row) read from `table`.
pub(crate) fn decode_event(row: &SqliteRow, table: &str) -> Result<OutboxEvent> {
    Columns::new(row, table)?.event()
}

/// Decodes a DLQ row read from `table`.
pub(crate) fn decode_dlq_event(row: &SqliteRow, table: &str) -> Result<DlqEvent> {
    let columns = Columns::new(row, table)?;
    let dlq_status = columns.text("dlq_status")?;
    Ok(DlqEvent {
        event: columns.event()?,
        dlq_status: dlq_status
            .parse()
            .map_err(|_| columns.bad("dlq_status", format!("unknown DLQ status '{dlq_status}'")))?,
        moved_at: columns.timestamp("moved_at")?,
    })
}

/// Parses an id column read on its own (inbox queries), naming the table on failure.
pub(crate) fn decode_id(text: &str, table: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|error| {
        Error::new(ErrorKind::Decode, format!("{table}.id: '{text}' is not a UUID")).with_source(error)
    })
}
