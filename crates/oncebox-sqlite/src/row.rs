//! How SQLite stores the outbox and DLQ columns, for the row decoding shared by the sqlx dialects.

use oncebox_sqlx::TextFormat;
use sqlx::sqlite::SqliteRow;

/// Everything as text (ids hyphenated, times RFC 3339 in UTC, headers JSON) except `attempts`, an
/// `INTEGER`.
pub(crate) type SqliteRowFormat = TextFormat<SqliteRow>;
