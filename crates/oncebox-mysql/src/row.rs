//! How MySQL stores the outbox and DLQ columns, for the row decoding shared by the sqlx dialects.

use oncebox_sqlx::NativeFormat;
use sqlx::mysql::MySqlRow;

/// `BINARY(16)` ids and `DATETIME(6)` times, which sqlx decodes natively; headers as `LONGTEXT`
/// holding JSON (checked by `JSON_VALID`).
pub(crate) type MySqlRowFormat = NativeFormat<MySqlRow, String>;
