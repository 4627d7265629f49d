//! Reading rows into the core types. A malformed value is a decode error naming table, column
//! and row, never a panic; ids are RAW(16), the UUID's bytes in big-endian order.

use chrono::{DateTime, NaiveDateTime, Utc};
use oncebox_core::event::last_error_text;
use oncebox_core::stored::{InboxMessage, NewInboxMessage};
use oncebox_core::{DlqEvent, Error, ErrorKind, Headers, OutboxEvent, Result};
use oracle::Row;
use oracle::sql_type::FromSql;
use uuid::Uuid;

use crate::error::OraResultExt;

/// The stored form of an id: its 16 bytes, most significant first (as MySQL's `BINARY(16)` and
/// PostgreSQL's `uuid` wire format).
pub(crate) fn id_bytes(id: Uuid) -> Vec<u8> {
    id.as_bytes().to_vec()
}

/// An id as stored, or why it is not one.
pub(crate) fn id_from_bytes(bytes: &[u8]) -> std::result::Result<Uuid, String> {
    Uuid::from_slice(bytes).map_err(|_| format!("{} bytes, not the 16 of a UUID", bytes.len()))
}

/// A timestamp column (UTC `TIMESTAMP(6)`).
pub(crate) fn utc(time: NaiveDateTime) -> DateTime<Utc> {
    time.and_utc()
}

/// Headers as stored (JSON text of an object of strings); empty text is no headers.
pub(crate) fn headers_from_text(text: &str) -> std::result::Result<Headers, String> {
    if text.is_empty() {
        return Ok(Headers::new());
    }
    serde_json::from_str(text).map_err(|error| format!("not a JSON object of strings: {error}"))
}

/// Headers as stored.
pub(crate) fn headers_to_text(headers: &Headers) -> Result<String> {
    serde_json::to_string(headers).map_err(|error| {
        Error::new(ErrorKind::Serialization, format!("headers could not be written as JSON: {error}"))
    })
}

/// The columns of one row of `table`, naming the row in every error.
pub(crate) struct Columns<'r> {
    row: &'r Row,
    table: &'r str,
    /// The id as stored, in hex, for messages.
    shown_id: String,
}

impl<'r> Columns<'r> {
    /// Reads the row's id: an error when the column cannot be read at all; an inner error, with
    /// the stored bytes, when they are not a UUID.
    pub(crate) fn new(row: &'r Row, table: &'r str) -> Result<(Self, Vec<u8>, Result<Uuid>)> {
        let raw: Vec<u8> = row.get("ID").map_err(|error| {
            Error::new(ErrorKind::Decode, format!("{table}.id could not be read")).with_source(error)
        })?;
        // The hyphenated UUID, as every other message names an event; raw hex when it is none.
        let shown_id = Uuid::from_slice(&raw)
            .map(|id| id.to_string())
            .unwrap_or_else(|_| raw.iter().map(|byte| format!("{byte:02x}")).collect());
        let columns = Self { row, table, shown_id };
        let id = id_from_bytes(&raw).map_err(|problem| columns.bad("id", problem));
        Ok((columns, raw, id))
    }

    /// A decode error for `column` of this row.
    fn bad(&self, column: &str, problem: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Decode, format!("{}.{column} of row {}: {problem}", self.table, self.shown_id))
    }

    /// Reads `column` as `T`.
    pub(crate) fn get<T: FromSql>(&self, column: &str) -> Result<T> {
        self.row.get(column.to_ascii_uppercase().as_str()).map_err(|error| self.bad(column, error))
    }

    fn time(&self, column: &str) -> Result<DateTime<Utc>> {
        self.get::<NaiveDateTime>(column).map(utc)
    }

    fn optional_time(&self, column: &str) -> Result<Option<DateTime<Utc>>> {
        self.get::<Option<NaiveDateTime>>(column).map(|time| time.map(utc))
    }

    fn status<S: std::str::FromStr>(&self, column: &str, noun: &str) -> Result<S> {
        let text: String = self.get(column)?;
        text.parse().map_err(|_| self.bad(column, format!("unknown {noun} '{text}'")))
    }

    /// The outbox columns of the row whose id is `id`.
    pub(crate) fn event(&self, id: Uuid) -> Result<OutboxEvent> {
        let attempts: i64 = self.get("attempts")?;
        let headers: Option<String> = self.get("headers")?;
        let headers = headers_from_text(headers.as_deref().unwrap_or_default())
            .map_err(|problem| self.bad("headers", problem))?;
        let claim_token: Option<Vec<u8>> = self.get("claim_token")?;
        Ok(OutboxEvent {
            id,
            event_type: self.get("event_type")?,
            // Oracle stores '' as NULL: NULL text is the empty text that was written.
            payload: self.get::<Option<String>>("payload")?.unwrap_or_default(),
            payload_type: self.get::<Option<String>>("payload_type")?.unwrap_or_default(),
            headers,
            partition_key: self.get("partition_key")?,
            status: self.status("status", "status")?,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            next_retry_at: self.time("next_retry_at")?,
            created_at: self.time("created_at")?,
            updated_at: self.time("updated_at")?,
            processed_at: self.get::<Option<NaiveDateTime>>("processed_at")?.map(utc),
            last_error: self.get("last_error")?,
            claim_token: claim_token
                .map(|bytes| id_from_bytes(&bytes).map_err(|problem| self.bad("claim_token", problem)))
                .transpose()?,
        })
    }

    /// `column` as a nullable id (RAW(16)).
    fn optional_id(&self, column: &str) -> Result<Option<Uuid>> {
        let bytes: Option<Vec<u8>> = self.get(column)?;
        bytes.map(|bytes| id_from_bytes(&bytes).map_err(|problem| self.bad(column, problem))).transpose()
    }

    /// The durable inbox columns of the row whose id is `id`.
    pub(crate) fn inbox_message(&self, id: Uuid) -> Result<InboxMessage> {
        let attempts: i64 = self.get("attempts")?;
        // headers is NOT NULL with an IS JSON check; NULL is read as no headers all the same,
        // as the outbox's headers are.
        let headers: Option<String> = self.get("headers")?;
        let headers = headers_from_text(headers.as_deref().unwrap_or_default())
            .map_err(|problem| self.bad("headers", problem))?;
        Ok(InboxMessage {
            message: NewInboxMessage {
                consumer: self.get("consumer")?,
                id,
                event_type: self.get("event_type")?,
                payload_type: self.get("payload_type")?,
                // An empty payload is stored as NULL: NULL is the empty payload that was stored.
                payload: self.get::<Option<Vec<u8>>>("payload")?.unwrap_or_default(),
                headers,
                source: self.get("source")?,
                correlation_id: self.get("correlation_id")?,
                created_at: self.optional_time("created_at")?,
            },
            status: self.status("status", "inbox status")?,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            received_at: self.time("received_at")?,
            available_at: self.optional_time("available_at")?,
            processed_at: self.optional_time("processed_at")?,
            last_error: self.get("last_error")?,
            claim_token: self.optional_id("claim_token")?,
            locked_at: self.optional_time("locked_at")?,
        })
    }

    /// The DLQ columns of the row whose id is `id`.
    pub(crate) fn dlq_event(&self, id: Uuid) -> Result<DlqEvent> {
        Ok(DlqEvent {
            event: self.event(id)?,
            dlq_status: self.status("dlq_status", "DLQ status")?,
            moved_at: self.time("moved_at")?,
        })
    }
}

/// Rows read together (a claim, a transfer, a listing), decoded one by one.
#[derive(Debug, Default)]
pub(crate) struct Decoded<T> {
    /// The rows that decoded, in read order.
    pub(crate) rows: Vec<T>,
    /// The rows that did not: their id as stored and the decode error.
    pub(crate) undecodable: Vec<(Vec<u8>, Error)>,
}

impl<T> Decoded<T> {
    /// Decodes `rows` of `table` with `decode`, keeping the ones that fail apart.
    pub(crate) fn of(
        rows: &[Row],
        table: &str,
        decode: impl Fn(&Columns<'_>, Uuid) -> Result<T>,
    ) -> Result<Self> {
        let mut decoded = Self { rows: Vec::with_capacity(rows.len()), undecodable: Vec::new() };
        for row in rows {
            let (columns, raw, id) = Columns::new(row, table)?;
            match id.and_then(|id| decode(&columns, id)) {
                Ok(value) => decoded.rows.push(value),
                Err(error) => decoded.undecodable.push((raw, error)),
            }
        }
        Ok(decoded)
    }

    /// The one row a look-up by id read, if any; a row that does not decode is an error.
    pub(crate) fn one(
        rows: &[Row],
        table: &str,
        decode: impl Fn(&Columns<'_>, Uuid) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut decoded = Self::of(rows, table, decode)?;
        match decoded.undecodable.pop() {
            Some((_, error)) => Err(error),
            None => Ok(decoded.rows.pop()),
        }
    }

    /// Logs the rows left out: they stay where they are, for a person to fix or delete, and one
    /// bad row does not hide the rest.
    pub(crate) fn warn_left_out(&self, what: &str) {
        for (_, error) in &self.undecodable {
            tracing::warn!(%error, "{what} cannot be decoded; left out of the result");
        }
    }
}

/// The groups of a count query (`event_type`, a status column, `row_count`), the status parsed;
/// `noun` names the kind of status in the error for one the library does not know.
pub(crate) fn status_counts<S: std::str::FromStr>(
    rows: &[Row],
    table: &str,
    column: &str,
    noun: &str,
    context: &str,
) -> Result<Vec<(String, S, u64)>> {
    rows.iter()
        .map(|row| {
            let (event_type, status, count): (String, String, i64) = row.get_as().context(context)?;
            let parsed = status.parse().map_err(|_| {
                Error::new(ErrorKind::Decode, format!("{table}.{column}: unknown {noun} '{status}'"))
            })?;
            Ok((event_type, parsed, u64::try_from(count).unwrap_or_default()))
        })
        .collect()
}

impl Decoded<OutboxEvent> {
    /// The stored ids of every row read: the decoded rows, then the undecodable ones.
    pub(crate) fn stored_ids(&self) -> Vec<Vec<u8>> {
        let decoded = self.rows.iter().map(|event| id_bytes(event.id));
        decoded.chain(self.undecodable.iter().map(|(raw, _)| raw.clone())).collect()
    }
}

/// The `last_error` of a row given up on because it cannot be decoded.
pub(crate) fn never_sent(error: &Error) -> String {
    let text = format!("never sent: the row cannot be decoded: {error}");
    last_error_text(&text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stored_big_endian_as_on_the_other_dialects() {
        let id = Uuid::parse_str("0190f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506").unwrap();
        let bytes = id_bytes(id);
        assert_eq!(bytes[..4], [0x01, 0x90, 0xf3, 0xa4]);
        assert_eq!(bytes[15], 0x06);
        // The MySQL dialect binds `Uuid` as BINARY(16) through sqlx, which writes `as_bytes()`;
        // the same 16 bytes here keep ids comparable across databases and tools.
        assert_eq!(bytes, id.as_bytes());
        assert_eq!(id_from_bytes(&bytes).unwrap(), id);
        assert!(id_from_bytes(&bytes[..15]).unwrap_err().contains("15 bytes"));
    }

    #[test]
    fn headers_round_trip_and_bad_ones_are_named() {
        let mut headers = Headers::new();
        headers.insert("traceparent".into(), "00-abc-01".into());
        let text = headers_to_text(&headers).unwrap();
        assert_eq!(headers_from_text(&text).unwrap(), headers);
        assert_eq!(headers_from_text("").unwrap(), Headers::new());
        assert!(headers_from_text("[1]").unwrap_err().contains("JSON object"));
    }

    #[test]
    fn timestamps_are_read_as_utc() {
        let naive = chrono::NaiveDate::from_ymd_opt(2026, 12, 6)
            .unwrap()
            .and_hms_micro_opt(10, 11, 12, 123_456)
            .unwrap();
        assert_eq!(utc(naive).to_rfc3339(), "2026-12-06T10:11:12.123456+00:00");
    }
}
