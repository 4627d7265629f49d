//! How PostgreSQL stores the outbox and DLQ columns, for the row decoding shared by the sqlx
//! dialects.

use oncebox_core::Headers;
use oncebox_sqlx::NativeFormat;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

/// Native `uuid`, `timestamptz` and `integer` columns; headers as `jsonb`.
pub(crate) type PgRowFormat = NativeFormat<PgRow, Json<Headers>>;
