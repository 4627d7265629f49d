//! Turns sqlx errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_sqlx::ServerErrors;
pub(crate) use oncebox_sqlx::SqlxResultExt;
use sqlx::error::DatabaseError;

/// SQLite primary result codes (the low byte of an extended code) after which trying again later
/// may succeed: the database was busy or locked by another connection, memory or disk ran short, or
/// the file could not be read, written or opened for a moment.
const TEMPORARY_CODES: &[i32] = &[
    5,  // SQLITE_BUSY
    6,  // SQLITE_LOCKED
    7,  // SQLITE_NOMEM
    10, // SQLITE_IOERR
    13, // SQLITE_FULL
    14, // SQLITE_CANTOPEN
    15, // SQLITE_PROTOCOL
];

/// SQLite's reading of its result codes, for the error mapping shared by the sqlx dialects.
pub(crate) struct SqliteServerErrors;

impl ServerErrors for SqliteServerErrors {
    fn is_temporary(error: &(dyn DatabaseError + 'static)) -> bool {
        error.code().and_then(|code| code.parse::<i32>().ok()).is_some_and(is_temporary_code)
    }
}

/// Every `.context(…)` on a sqlx result in this crate classifies with [`SqliteServerErrors`].
impl<T> SqlxResultExt<SqliteServerErrors, T> for sqlx::Result<T> {}

/// Whether an (extended) result code names a failure that may pass.
fn is_temporary_code(code: i32) -> bool {
    TEMPORARY_CODES.contains(&(code & 0xff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_and_locked_are_temporary_in_every_extended_form() {
        assert!(is_temporary_code(5) && is_temporary_code(6) && is_temporary_code(517));
        assert!(!is_temporary_code(19) && !is_temporary_code(2067));
    }
}
