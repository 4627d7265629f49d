//! Decoding rows into the core types; a malformed value is a decode error naming table, row and
//! column, never a panic.

use chrono::{DateTime, Utc};
use oncebox_core::{DlqEvent, Error, ErrorKind, Headers, OutboxEvent, Result};
use sqlx::mysql::MySqlRow;
use sqlx::{Decode, MySql, Row, Type};
use uuid::Uuid;

use crate::error::database_error;

/// Reads the columns of one row of `table`.
struct Columns<'r> {
    row: &'r MySqlRow,
    table: &'r str,
    id: Uuid,
}

impl<'r> Columns<'r> {
    fn new(row: &'r MySqlRow, table: &'r str) -> Result<Self> {
        let id =
            row.try_get::<Uuid, _>("id").map_err(|e| database_error(&format!("reading {table}.id"), e))?;
        Ok(Self { row, table, id })
    }

    fn bad(&self, column: &str, problem: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Decode, format!("{}.{column} of row {}: {problem}", self.table, self.id))
    }

    fn get<T>(&self, column: &str) -> Result<T>
    where
        T: for<'a> Decode<'a, MySql> + Type<MySql>,
    {
        self.row.try_get::<T, _>(column).map_err(|error| self.bad(column, error))
    }

    fn event(&self) -> Result<OutboxEvent> {
        let status: String = self.get("status")?;
        let attempts: i32 = self.get("attempts")?;
        let headers_text: String = self.get("headers")?;
        let headers: Headers = serde_json::from_str(&headers_text)
            .map_err(|error| self.bad("headers", format!("not a JSON object of strings: {error}")))?;
        Ok(OutboxEvent {
            id: self.id,
            event_type: self.get("event_type")?,
            payload: self.get("payload")?,
            payload_type: self.get("payload_type")?,
            headers,
            partition_key: self.get("partition_key")?,
            status: status.parse().map_err(|_| self.bad("status", format!("unknown status '{status}'")))?,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            next_retry_at: self.get::<DateTime<Utc>>("next_retry_at")?,
            created_at: self.get::<DateTime<Utc>>("created_at")?,
            updated_at: self.get::<DateTime<Utc>>("updated_at")?,
            processed_at: self.get::<Option<DateTime<Utc>>>("processed_at")?,
            last_error: self.get("last_error")?,
            claim_token: self.get("claim_token")?,
        })
    }
}

/// Decodes an outbox row (or the outbox part of a DLQ row) read from `table`.
pub(crate) fn decode_event(row: &MySqlRow, table: &str) -> Result<OutboxEvent> {
    Columns::new(row, table)?.event()
}

/// Decodes a DLQ row read from `table`.
pub(crate) fn decode_dlq_event(row: &MySqlRow, table: &str) -> Result<DlqEvent> {
    let columns = Columns::new(row, table)?;
    let dlq_status: String = columns.get("dlq_status")?;
    Ok(DlqEvent {
        event: columns.event()?,
        dlq_status: dlq_status
            .parse()
            .map_err(|_| columns.bad("dlq_status", format!("unknown DLQ status '{dlq_status}'")))?,
        moved_at: columns.get::<DateTime<Utc>>("moved_at")?,
    })
}

/// Parses a status read by a count query, naming the table and column on failure.
pub(crate) fn parse_status<S: std::str::FromStr>(text: &str, table: &str, column: &str) -> Result<S> {
    text.parse()
        .map_err(|_| Error::new(ErrorKind::Decode, format!("{table}.{column}: unknown status '{text}'")))
}

/// A `COUNT(*)` as `u64`.
pub(crate) fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}
