//! Turns sqlx errors into the oncebox error, leaving to each dialect only which server errors are
//! temporary.

use oncebox_core::{Error, ErrorKind};
use sqlx::error::DatabaseError;

/// A dialect's reading of its server's error codes.
pub trait ServerErrors {
    /// Whether trying again later may succeed after the server answered with `error`.
    fn is_temporary(error: &(dyn DatabaseError + 'static)) -> bool;
}

/// Wraps a sqlx error with `context` (what was being done), keeping it as the source.
///
/// A row that cannot be decoded is a decode error; anything else is a database error, temporary
/// when the connection or pool failed or when `S` says the server error may pass.
pub fn database_error<S: ServerErrors>(context: &str, error: sqlx::Error) -> Error {
    match &error {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::ColumnNotFound(_) => {
            Error::new(ErrorKind::Decode, format!("{context}: a row could not be decoded")).with_source(error)
        }
        _ => {
            let temporary = is_temporary::<S>(&error);
            Error::database(context.to_owned(), temporary, error)
        }
    }
}

/// Whether a later attempt may not meet the same failure.
fn is_temporary<S: ServerErrors>(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => S::is_temporary(database.as_ref()),
        _ => false,
    }
}

/// Adapts `Result<T, sqlx::Error>` to the oncebox result with context, classifying server errors
/// with `S`.
///
/// A dialect crate implements it once for its own [`ServerErrors`] type, with an empty body:
/// `impl<T> SqlxResultExt<PgServerErrors, T> for sqlx::Result<T> {}`. Being the only
/// implementation the crate sees, it is the one every `.context(…)` there picks, so call sites
/// never name the dialect.
pub trait SqlxResultExt<S: ServerErrors, T>: Into<Result<T, sqlx::Error>> {
    /// Converts the error, naming what was being done.
    fn context(self, context: &str) -> oncebox_core::Result<T> {
        self.into().map_err(|error| database_error::<S>(context, error))
    }
}

/// For errors that can only be decode or lookup failures (reading a column of a fetched row),
/// where no server answer is involved.
pub(crate) struct NoServerAnswer;

impl ServerErrors for NoServerAnswer {
    fn is_temporary(_error: &(dyn DatabaseError + 'static)) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_timeouts_and_io_failures_are_temporary() {
        assert!(database_error::<NoServerAnswer>("claiming", sqlx::Error::PoolTimedOut).is_temporary());
        let io = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(database_error::<NoServerAnswer>("claiming", io).is_temporary());
        let closed = database_error::<NoServerAnswer>("claiming", sqlx::Error::PoolClosed);
        assert!(!closed.is_temporary());
        assert_eq!(closed.kind(), ErrorKind::Database);
        assert!(closed.to_string().contains("claiming"), "{closed}");
    }

    #[test]
    fn undecodable_rows_are_decode_errors() {
        let missing = sqlx::Error::ColumnNotFound("status".into());
        let error = database_error::<NoServerAnswer>("reading an event", missing);
        assert_eq!(error.kind(), ErrorKind::Decode);
        assert!(error.to_string().contains("a row could not be decoded"), "{error}");
    }
}
