//! Decoding rows into the core types; a malformed value is a decode error naming table, row and
//! column, never a panic.

use std::fmt::Display;
use std::marker::PhantomData;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use oncebox_core::event::last_error_text;
use oncebox_core::stored::{InboxMessage, NewInboxMessage};
use oncebox_core::{DlqEvent, Error, ErrorKind, Headers, OutboxEvent, Result};
use sqlx::types::Json;
use sqlx::{ColumnIndex, Decode, Row, Type};
use uuid::Uuid;

use crate::error::{NoServerAnswer, database_error};

/// A value as a database stores it, turned into the type the core model uses.
///
/// Databases with native UUID and timestamp types hand those over unchanged; databases that store
/// them as text (SQLite) parse them here, saying what was wrong with the text.
pub trait StoredValue<T>: Sized {
    /// The value, or a description of why it is not a valid `T`.
    fn into_model(self) -> std::result::Result<T, String>;
}

impl StoredValue<Uuid> for Uuid {
    fn into_model(self) -> std::result::Result<Uuid, String> {
        Ok(self)
    }
}

impl StoredValue<Uuid> for String {
    fn into_model(self) -> std::result::Result<Uuid, String> {
        Uuid::parse_str(&self).map_err(|error| format!("'{self}' is not a UUID ({error})"))
    }
}

impl StoredValue<DateTime<Utc>> for DateTime<Utc> {
    fn into_model(self) -> std::result::Result<DateTime<Utc>, String> {
        Ok(self)
    }
}

/// Timestamps stored as RFC 3339 text.
impl StoredValue<DateTime<Utc>> for String {
    fn into_model(self) -> std::result::Result<DateTime<Utc>, String> {
        DateTime::parse_from_rfc3339(&self)
            .map(|time| time.with_timezone(&Utc))
            .map_err(|error| format!("'{self}' is not a timestamp ({error})"))
    }
}

/// Headers stored as a JSON column the driver decodes (PostgreSQL `jsonb`).
impl StoredValue<Headers> for Json<Headers> {
    fn into_model(self) -> std::result::Result<Headers, String> {
        Ok(self.0)
    }
}

/// Headers stored as JSON text; empty text is no headers.
impl StoredValue<Headers> for String {
    fn into_model(self) -> std::result::Result<Headers, String> {
        if self.is_empty() {
            return Ok(Headers::new());
        }
        serde_json::from_str(&self).map_err(|error| format!("not a JSON object of strings: {error}"))
    }
}

/// How a dialect stores the outbox and DLQ columns whose SQL types differ between databases.
pub trait RowFormat {
    /// The row type of the database.
    type Row: Row;
    /// How `id` and `claim_token` are stored.
    type Uuid: StoredValue<Uuid> + Display + for<'r> Decode<'r, Database<Self>> + Type<Database<Self>>;
    /// How the timestamp columns are stored.
    type Timestamp: StoredValue<DateTime<Utc>> + for<'r> Decode<'r, Database<Self>> + Type<Database<Self>>;
    /// How `attempts` is stored.
    type Attempts: Into<i64> + for<'r> Decode<'r, Database<Self>> + Type<Database<Self>>;
    /// How `headers` is stored.
    type Headers: StoredValue<Headers> + for<'r> Decode<'r, Database<Self>> + Type<Database<Self>>;
}

/// The database of a [`RowFormat`].
type Database<F> = <<F as RowFormat>::Row as Row>::Database;

/// The format of databases with native `uuid` and timestamp columns and an `integer` attempt
/// count (PostgreSQL, MySQL), for rows `R` whose headers are stored as `H`.
pub struct NativeFormat<R, H>(PhantomData<fn() -> (R, H)>);

impl<R, H> RowFormat for NativeFormat<R, H>
where
    R: Row,
    Uuid: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    DateTime<Utc>: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i32: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    H: StoredValue<Headers> + for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    type Row = R;
    type Uuid = Uuid;
    type Timestamp = DateTime<Utc>;
    type Attempts = i32;
    type Headers = H;
}

/// The format of databases that store ids, times and headers as text (ids hyphenated, times
/// RFC 3339 in UTC, headers JSON) and `attempts` as a 64-bit integer (SQLite), for rows `R`.
pub struct TextFormat<R>(PhantomData<fn() -> R>);

impl<R> RowFormat for TextFormat<R>
where
    R: Row,
    String: for<'r> Decode<'r, R::Database> + Type<R::Database>,
    i64: for<'r> Decode<'r, R::Database> + Type<R::Database>,
{
    type Row = R;
    type Uuid = String;
    type Timestamp = String;
    type Attempts = i64;
    type Headers = String;
}

/// Reads the columns of one row of `table`, naming the row in every error.
struct Columns<'r, R> {
    row: &'r R,
    table: &'r str,
    id: String,
}

impl<'r, R> Columns<'r, R>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
{
    /// A decode error for `column` of this row.
    fn bad(&self, column: &str, problem: impl Display) -> Error {
        Error::new(ErrorKind::Decode, format!("{}.{column} of row {}: {problem}", self.table, self.id))
    }

    /// Reads `column` as `T`.
    fn get<T>(&self, column: &str) -> Result<T>
    where
        T: Decode<'r, R::Database> + Type<R::Database>,
    {
        self.row.try_get::<T, _>(column).map_err(|error| self.bad(column, error))
    }

    /// Reads `column` as stored (`S`) and turns it into the model type `T`.
    fn stored<S, T>(&self, column: &str) -> Result<T>
    where
        S: StoredValue<T> + Decode<'r, R::Database> + Type<R::Database>,
    {
        self.get::<S>(column)?.into_model().map_err(|problem| self.bad(column, problem))
    }

    /// Reads a nullable `column` as stored (`S`) and turns it into the model type `T`.
    fn optional_stored<S, T>(&self, column: &str) -> Result<Option<T>>
    where
        S: StoredValue<T> + Decode<'r, R::Database> + Type<R::Database>,
    {
        let stored = self.get::<Option<S>>(column)?;
        stored.map(|value| value.into_model().map_err(|problem| self.bad(column, problem))).transpose()
    }

    /// Reads a status `column` and parses it; `noun` names the kind of status in the message.
    fn status<S: FromStr>(&self, column: &str, noun: &str) -> Result<S>
    where
        String: Decode<'r, R::Database> + Type<R::Database>,
    {
        let text: String = self.get(column)?;
        text.parse().map_err(|_| self.bad(column, format!("unknown {noun} '{text}'")))
    }

    fn new<F: RowFormat<Row = R>>(row: &'r R, table: &'r str) -> Result<(Self, Uuid)> {
        let (columns, id) = Self::read_id::<F>(row, table)?;
        Ok((columns, id?))
    }

    /// Reads the id: an error when the column cannot be read at all, and an inner error when it
    /// holds something that is not a UUID (possible where ids are stored as text), in which case
    /// [`Columns::id`] still has the value as stored.
    fn read_id<F: RowFormat<Row = R>>(row: &'r R, table: &'r str) -> Result<(Self, Result<Uuid>)> {
        let stored = row
            .try_get::<F::Uuid, _>("id")
            .map_err(|error| database_error::<NoServerAnswer>(&format!("reading {table}.id"), error))?;
        let columns = Self { row, table, id: stored.to_string() };
        let id = stored.into_model().map_err(|problem| columns.bad("id", problem));
        Ok((columns, id))
    }

    fn event<F: RowFormat<Row = R>>(&self, id: Uuid) -> Result<OutboxEvent>
    where
        String: Decode<'r, R::Database> + Type<R::Database>,
        Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    {
        let status = self.status("status", "status")?;
        let attempts: i64 = self.get::<F::Attempts>("attempts")?.into();
        let headers = self.stored::<F::Headers, _>("headers")?;
        Ok(OutboxEvent {
            id,
            event_type: self.get("event_type")?,
            payload: self.get("payload")?,
            payload_type: self.get("payload_type")?,
            headers,
            partition_key: self.get("partition_key")?,
            status,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            next_retry_at: self.stored::<F::Timestamp, _>("next_retry_at")?,
            created_at: self.stored::<F::Timestamp, _>("created_at")?,
            updated_at: self.stored::<F::Timestamp, _>("updated_at")?,
            processed_at: self.optional_stored::<F::Timestamp, _>("processed_at")?,
            last_error: self.get("last_error")?,
            claim_token: self.optional_stored::<F::Uuid, _>("claim_token")?,
        })
    }
}

impl DecodedRows<OutboxEvent> {
    /// The ids of every row read whose id is a UUID: the decoded rows, then the undecodable ones.
    pub fn ids(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.rows.iter().map(|event| event.id).chain(self.undecodable.iter().map(|(id, _)| *id))
    }
}

/// The `last_error` of a row given up on because it cannot be decoded.
fn never_sent(error: &Error) -> String {
    let text = format!("never sent: the row cannot be decoded: {error}");
    last_error_text(&text).to_owned()
}

/// Rows read together (a claim, a transfer), decoded one by one.
#[derive(Debug, Default)]
pub struct DecodedRows<T> {
    /// The rows that decoded, in read order.
    pub rows: Vec<T>,
    /// The rows that did not: their id and a decode error naming table, column and row.
    pub undecodable: Vec<(Uuid, Error)>,
    /// The rows whose id is not a UUID (only where ids are stored as text): the id as stored, by
    /// which the row can still be addressed, and the decode error.
    pub malformed_ids: Vec<(String, Error)>,
}

impl<T> DecodedRows<T> {
    /// Logs the rows left out of [`rows`](Self::rows), `what` naming them (e.g. "a dead letter
    /// queue row"): they stay where they are, for a person to fix or delete, and one bad row does
    /// not hide the rest.
    pub fn warn_left_out(&self, what: &str) {
        for (id, error) in &self.undecodable {
            tracing::warn!(%id, %error, "{what} cannot be decoded; left out of the result");
        }
        for (id, error) in &self.malformed_ids {
            tracing::warn!(%id, %error, "{what} has an id that is not a UUID; left out of the result");
        }
    }

    /// The rows that did not decode, each with the `last_error` text a dialect stores when it
    /// gives up on the row: what went wrong, naming table, column and row, cut to
    /// [`LAST_ERROR_MAX_CHARS`](oncebox_core::event::LAST_ERROR_MAX_CHARS).
    pub fn undecodable_failures(&self) -> Vec<(Uuid, String)> {
        self.undecodable.iter().map(|(id, error)| (*id, never_sent(error))).collect()
    }

    /// The rows whose id is not a UUID, by their id as stored, each with the `last_error` text of
    /// [`undecodable_failures`](Self::undecodable_failures).
    pub fn malformed_id_failures(&self) -> Vec<(String, String)> {
        self.malformed_ids.iter().map(|(stored, error)| (stored.clone(), never_sent(error))).collect()
    }
}

impl<'r, R> Columns<'r, R>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn inbox_message<F: RowFormat<Row = R>>(&self, id: Uuid) -> Result<InboxMessage>
    where
        Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    {
        let attempts: i64 = self.get::<F::Attempts>("attempts")?.into();
        Ok(InboxMessage {
            message: NewInboxMessage {
                consumer: self.get("consumer")?,
                id,
                event_type: self.get("event_type")?,
                payload_type: self.get("payload_type")?,
                payload: self.get("payload")?,
                headers: self.stored::<F::Headers, _>("headers")?,
                source: self.get("source")?,
                correlation_id: self.get("correlation_id")?,
                created_at: self.optional_stored::<F::Timestamp, _>("created_at")?,
            },
            status: self.status("status", "inbox status")?,
            attempts: u32::try_from(attempts)
                .map_err(|_| self.bad("attempts", format!("{attempts} is out of range")))?,
            received_at: self.stored::<F::Timestamp, _>("received_at")?,
            available_at: self.optional_stored::<F::Timestamp, _>("available_at")?,
            processed_at: self.optional_stored::<F::Timestamp, _>("processed_at")?,
            last_error: self.get("last_error")?,
            claim_token: self.optional_stored::<F::Uuid, _>("claim_token")?,
            locked_at: self.optional_stored::<F::Timestamp, _>("locked_at")?,
        })
    }

    fn dlq_event<F: RowFormat<Row = R>>(&self, id: Uuid) -> Result<DlqEvent> {
        let dlq_status = self.status("dlq_status", "DLQ status")?;
        Ok(DlqEvent {
            event: self.event::<F>(id)?,
            dlq_status,
            moved_at: self.stored::<F::Timestamp, _>("moved_at")?,
        })
    }
}

/// Decoding outbox and DLQ rows of a [`RowFormat`] into the core types; a malformed value is a
/// decode error naming table, row and column.
pub trait DecodeRow: RowFormat {
    /// Decodes an outbox row (or the outbox part of a DLQ row) read from `table`.
    fn decode_event(row: &Self::Row, table: &str) -> Result<OutboxEvent>;

    /// Decodes outbox rows read together from `table` one by one, so that one malformed row does
    /// not hide the others: it is reported with its id (or, when the id itself is not a UUID, with
    /// the id as stored), for the caller to settle on its own. Fails only when a row's id cannot be
    /// read at all, since such a row cannot be addressed.
    fn decode_events(rows: &[Self::Row], table: &str) -> Result<DecodedRows<OutboxEvent>>;

    /// Decodes DLQ rows read together from `table` one by one, like
    /// [`decode_events`](DecodeRow::decode_events).
    fn decode_dlq_events(rows: &[Self::Row], table: &str) -> Result<DecodedRows<DlqEvent>>;

    /// Decodes a DLQ row read from `table`.
    fn decode_dlq_event(row: &Self::Row, table: &str) -> Result<DlqEvent>;

    /// Decodes a durable inbox row read from `table`.
    fn decode_inbox_message(row: &Self::Row, table: &str) -> Result<InboxMessage>;
}

impl<F> DecodeRow for F
where
    F: RowFormat,
    for<'c> &'c str: ColumnIndex<F::Row>,
    String: for<'r> Decode<'r, Database<F>> + Type<Database<F>>,
    Option<String>: for<'r> Decode<'r, Database<F>> + Type<Database<F>>,
    Vec<u8>: for<'r> Decode<'r, Database<F>> + Type<Database<F>>,
{
    fn decode_inbox_message(row: &F::Row, table: &str) -> Result<InboxMessage> {
        let (columns, id) = Columns::new::<F>(row, table)?;
        columns.inbox_message::<F>(id)
    }

    fn decode_event(row: &F::Row, table: &str) -> Result<OutboxEvent> {
        let (columns, id) = Columns::new::<F>(row, table)?;
        columns.event::<F>(id)
    }

    fn decode_dlq_event(row: &F::Row, table: &str) -> Result<DlqEvent> {
        let (columns, id) = Columns::new::<F>(row, table)?;
        columns.dlq_event::<F>(id)
    }

    fn decode_events(rows: &[F::Row], table: &str) -> Result<DecodedRows<OutboxEvent>> {
        decode_each::<F, _>(rows, table, |columns, id| columns.event::<F>(id))
    }

    fn decode_dlq_events(rows: &[F::Row], table: &str) -> Result<DecodedRows<DlqEvent>> {
        decode_each::<F, _>(rows, table, |columns, id| columns.dlq_event::<F>(id))
    }
}

/// Decodes each row with `decode`, keeping the rows that fail apart with their id.
fn decode_each<'r, F, T>(
    rows: &'r [F::Row],
    table: &'r str,
    decode: impl Fn(&Columns<'r, F::Row>, Uuid) -> Result<T>,
) -> Result<DecodedRows<T>>
where
    F: RowFormat,
    for<'c> &'c str: ColumnIndex<F::Row>,
{
    let mut decoded = DecodedRows {
        rows: Vec::with_capacity(rows.len()),
        undecodable: Vec::new(),
        malformed_ids: Vec::new(),
    };
    for row in rows {
        let (columns, id) = Columns::read_id::<F>(row, table)?;
        let id = match id {
            Ok(id) => id,
            Err(error) => {
                decoded.malformed_ids.push((columns.id.clone(), error));
                continue;
            }
        };
        match decode(&columns, id) {
            Ok(value) => decoded.rows.push(value),
            Err(error) => decoded.undecodable.push((id, error)),
        }
    }
    Ok(decoded)
}

/// Parses a status read by a count query, naming the table and column on failure.
pub fn parse_status<S: FromStr>(text: &str, table: &str, column: &str) -> Result<S> {
    text.parse()
        .map_err(|_| Error::new(ErrorKind::Decode, format!("{table}.{column}: unknown status '{text}'")))
}

/// A `COUNT(*)` as `u64`; a count is never negative, so the fallback is never taken.
pub fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

/// The rows of a count query grouped by event type and status (`(event_type, status, rows)`), with
/// the status parsed; `table` and `column` name where a status that does not parse was read.
pub fn status_counts<S: FromStr>(
    rows: Vec<(String, String, i64)>,
    table: &str,
    column: &str,
) -> Result<Vec<(String, S, u64)>> {
    rows.into_iter()
        .map(|(event_type, status, rows)| {
            Ok((event_type, parse_status(&status, table, column)?, count(rows)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_timestamps_parse_as_utc() {
        let parsed = StoredValue::<DateTime<Utc>>::into_model("2025-01-31T12:00:00.123Z".to_owned());
        assert_eq!(parsed.map(|time| time.timestamp_millis()).ok(), Some(1_738_324_800_123));
        let bad = StoredValue::<DateTime<Utc>>::into_model("yesterday".to_owned());
        assert!(bad.is_err_and(|problem| problem.contains("'yesterday' is not a timestamp")));
    }

    #[test]
    fn stored_uuid_text_must_parse() {
        let id = Uuid::now_v7();
        assert_eq!(StoredValue::<Uuid>::into_model(id.hyphenated().to_string()), Ok(id));
        let bad = StoredValue::<Uuid>::into_model("order-7".to_owned());
        assert!(bad.is_err_and(|problem| problem.contains("'order-7' is not a UUID")));
    }

    #[test]
    fn header_text_must_be_a_json_object_of_strings() {
        let empty = StoredValue::<Headers>::into_model(String::new());
        assert!(empty.is_ok_and(|headers| headers.is_empty()));
        let bad = StoredValue::<Headers>::into_model(r#"{"retries":3}"#.to_owned());
        assert!(bad.is_err_and(|problem| problem.contains("not a JSON object of strings")));
    }

    #[test]
    fn counts_name_the_column_of_an_unknown_status() {
        let rows = vec![("orders".to_owned(), "LOST".to_owned(), 3)];
        let error = status_counts::<oncebox_core::EventStatus>(rows, "outbox_events", "status");
        assert!(
            error.is_err_and(|error| error
                .to_string()
                .contains("outbox_events.status: unknown status 'LOST'"))
        );
        assert_eq!(count(-1), 0);
    }
}
