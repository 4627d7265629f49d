//! Turns driver errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_core::{Error, ErrorKind};
use sqlx::mysql::MySqlDatabaseError;

/// Server error numbers after which trying again later may succeed.
const TEMPORARY_NUMBERS: &[u16] = &[
    1040, // too many connections
    1053, // server shutdown in progress
    1205, // lock wait timeout exceeded
    1213, // deadlock found; the transaction was rolled back
    1317, // query execution was interrupted
    1927, // connection was killed (MariaDB)
    3572, // NOWAIT: a row was locked
    4031, // the client was disconnected by the server for inactivity (MySQL 8)
];
/// The duplicate-key error: for the inbox and job inserts, the answer "someone was first".
pub(crate) const DUPLICATE_KEY: u16 = 1062;

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

/// The server's error number, when `error` is a server error.
pub(crate) fn error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(database) => {
            database.try_downcast_ref::<MySqlDatabaseError>().map(MySqlDatabaseError::number)
        }
        _ => None,
    }
}

/// Whether a later attempt may not meet the same failure.
fn is_temporary(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => {
            let class_says_so =
                database.code().is_some_and(|state| state.starts_with("08") || state.starts_with("40"));
            class_says_so || error_number(error).is_some_and(is_temporary_number)
        }
        _ => false,
    }
}

/// Whether a server error number names a failure that may pass.
pub(crate) fn is_temporary_number(number: u16) -> bool {
    TEMPORARY_NUMBERS.contains(&number)
}

/// Wraps a mysql_async error with `context`: temporary when the connection broke or the server's
/// error number says so.
#[cfg(feature = "mysql-async")]
pub(crate) fn mysql_async_error(context: &str, error: mysql_async::Error) -> Error {
    let temporary = match &error {
        mysql_async::Error::Io(_) => true,
        mysql_async::Error::Server(server) => {
            server.state.starts_with("08")
                || server.state.starts_with("40")
                || is_temporary_number(server.code)
        }
        _ => false,
    };
    Error::database(context.to_owned(), temporary, error)
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
    fn pool_timeouts_io_failures_and_lock_errors_are_temporary() {
        assert!(database_error("claiming", sqlx::Error::PoolTimedOut).is_temporary());
        let io = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(database_error("claiming", io).is_temporary());
        let closed = database_error("claiming", sqlx::Error::PoolClosed);
        assert!(!closed.is_temporary());
        assert_eq!(closed.kind(), ErrorKind::Database);
        assert!(closed.to_string().contains("claiming"), "{closed}");
        assert!(is_temporary_number(1213) && is_temporary_number(1205));
        assert!(!is_temporary_number(DUPLICATE_KEY));
    }
}
