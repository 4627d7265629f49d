//! Turns sqlx errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_core::{Error, ErrorKind};

/// SQLSTATE classes after which trying again later may succeed: connection exceptions (08),
/// transaction rollbacks such as serialization failures and deadlocks (40), insufficient resources
/// (53), operator intervention such as an administrator shutdown or a server still starting (57)
/// and system errors (58).
const TEMPORARY_CLASSES: &[&str] = &["08", "40", "53", "57", "58"];
/// Single SQLSTATE codes outside those classes that are temporary: lock not available (55P03, e.g.
/// after `lock_timeout`).
const TEMPORARY_CODES: &[&str] = &["55P03"];

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

/// Whether a later attempt may not meet the same failure.
fn is_temporary(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| is_temporary_code(&code)),
        _ => false,
    }
}

/// Whether an SQLSTATE names a failure that may pass.
fn is_temporary_code(code: &str) -> bool {
    TEMPORARY_CODES.contains(&code) || TEMPORARY_CLASSES.iter().any(|class| code.starts_with(class))
}

/// Wraps a tokio-postgres error with `context`: temporary when the connection is gone or the
/// SQLSTATE says so.
#[cfg(feature = "tokio-postgres")]
pub(crate) fn tokio_postgres_error(context: &str, error: tokio_postgres::Error) -> Error {
    let temporary = error.is_closed() || error.code().is_some_and(|code| is_temporary_code(code.code()));
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
    fn pool_timeouts_and_io_failures_are_temporary() {
        assert!(database_error("claiming", sqlx::Error::PoolTimedOut).is_temporary());
        let io = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(database_error("claiming", io).is_temporary());
        let closed = database_error("claiming", sqlx::Error::PoolClosed);
        assert!(!closed.is_temporary());
        assert_eq!(closed.kind(), ErrorKind::Database);
        assert!(closed.to_string().contains("claiming"), "{closed}");
    }
}
