//! Turns sqlx errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_core::{Error, ErrorKind};

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

/// Wraps a sqlx error with `context` (what was being done), keeping it as the source.
pub(crate) fn database_error(context: &str, error: sqlx::Error) -> Error {
    match &error {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::ColumnNotFound(_) => {
            Error::new(ErrorKind::Decode, format!("{context}: a row could not be decoded")).with_source(error)
        }
        _ => {
            let temporary = is_temporary(&error);
            Error::database(context.to_owned(), temporary, error)
        }
    }
}

/// Whether the failure is one that a later attempt may not meet.
fn is_temporary(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| TEMPORARY_CODES.contains(&(code & 0xff))),
        _ => false,
    }
}

/// Adapts `Result<T, sqlx::Error>` to the oncebox result with context.
pub(crate) trait SqlxResultExt<T> {
    /// Converts the error, naming what was being done.
    fn context(self, context: &str) -> oncebox_core::Result<T>;
}

impl<T> SqlxResultExt<T> for Result<T, sqlx::Error> {
    fn context(self, context: &str) -> oncebox_core::Result<T> {
        self.map_err(|error| database_error(context, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_timeouts_and_io_failures_are_temporary() {
        assert!(database_error("claiming", sqlx::Error::PoolTimedOut).is_temporary());
        let io = sqlx::Error::Io(std::io::Error::other("disk went away"));
        assert!(database_error("claiming", io).is_temporary());
        let closed = database_error("claiming", sqlx::Error::PoolClosed);
        assert!(!closed.is_temporary());
        assert_eq!(closed.kind(), ErrorKind::Database);
        assert!(closed.to_string().contains("claiming"), "{closed}");
    }
}
