//! How SQLite stores the outbox and DLQ columns, for the row decoding shared by the sqlx dialects,
//! and the decoding of ids read on their own.

use oncebox_core::{Error, ErrorKind, Result};
use oncebox_sqlx::TextFormat;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

/// Everything as text (ids hyphenated, times RFC 3339 in UTC, headers JSON) except `attempts`, an
/// `INTEGER`.
pub(crate) type SqliteRowFormat = TextFormat<SqliteRow>;

/// Parses an id column read on its own (inbox queries), naming the table on failure.
pub(crate) fn decode_id(text: &str, table: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|error| {
        Error::new(ErrorKind::Decode, format!("{table}.id: '{text}' is not a UUID")).with_source(error)
    })
}
