//! What the sqlx dialects of oncebox (`oncebox-sqlite`, `oncebox-postgres`, `oncebox-mysql`)
//! share, written once over `sqlx::Row` and `sqlx::Database`:
//!
//! * the four DAOs ([`SqlxOutboxDao`], [`SqlxDlqDao`], [`SqlxInboxDao`], [`SqlxJobLock`]) and the
//!   [`SqlxStore`] (pool plus statements for one set of tables) that makes them;
//! * the statements the shared operations run ([`Statements`], read from each dialect's `sql/`
//!   files by [`sql_files!`]) and the runners the dialects' statements go through
//!   ([`Queries::execute`], [`Queries::fetch_all`], and [`Queries::execute_over_ids`] for a
//!   change over a list of ids);
//! * turning sqlx errors into [`oncebox_core::Error`] with a temporary/permanent verdict;
//! * decoding outbox and DLQ rows into the core types with errors that name table, row and
//!   column, and reading status counts.
//!
//! Each dialect supplies only what its database does differently: its [`Queries`] (how values
//! are bound, and the claim, settle and transfer statements whose shape differs; inbox records
//! and leases where its insert-or-skip does too),
//! which server error codes mean "try again later" ([`ServerErrors`]) and how its columns are
//! stored ([`RowFormat`]).
//!
//! ```
//! use oncebox_sqlx::{ServerErrors, database_error};
//! use sqlx::error::DatabaseError;
//!
//! /// A database whose server errors never pass by themselves.
//! struct NeverTemporary;
//!
//! impl ServerErrors for NeverTemporary {
//!     fn is_temporary(_error: &(dyn DatabaseError + 'static)) -> bool {
//!         false
//!     }
//! }
//!
//! // A pool that timed out may have a free connection next time, whatever the database.
//! let error = database_error::<NeverTemporary>("claiming a batch", sqlx::Error::PoolTimedOut);
//! assert!(error.is_temporary());
//! assert!(error.to_string().contains("claiming a batch"));
//! ```

#![deny(missing_docs)]

mod dao;
mod error;
mod row;
mod statement;
mod time;

pub use dao::{
    BoundQuery, Queries, SqlxDatabase, SqlxDlqDao, SqlxInboxDao, SqlxJobLock, SqlxOutboxDao, SqlxStore, limit,
};
pub use error::{ServerErrors, SqlxResultExt, database_error};
pub use row::{
    DecodeRow, DecodedRows, NativeFormat, RowFormat, StoredValue, TextFormat, count, parse_status,
    status_counts,
};
pub use statement::{Param, SqlFiles, Statement, Statements, id_slots};
pub use time::{MAX_SHIFT_MICROS, micros};
