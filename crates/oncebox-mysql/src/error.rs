//! Turns driver errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_core::Error;
use oncebox_sqlx::ServerErrors;
pub(crate) use oncebox_sqlx::SqlxResultExt;
use sqlx::error::DatabaseError;
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

/// MySQL's reading of its SQLSTATEs and error numbers, for the error mapping shared by the sqlx
/// dialects.
pub(crate) struct MySqlServerErrors;

impl ServerErrors for MySqlServerErrors {
    fn is_temporary(error: &(dyn DatabaseError + 'static)) -> bool {
        let class_says_so =
            error.code().is_some_and(|state| state.starts_with("08") || state.starts_with("40"));
        class_says_so
            || error
                .try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|error| is_temporary_number(error.number()))
    }
}

/// Every `.context(…)` on a sqlx result in this crate classifies with [`MySqlServerErrors`].
impl<T> SqlxResultExt<MySqlServerErrors, T> for sqlx::Result<T> {}

/// Wraps a sqlx error with `context` (what was being done), keeping it as the source.
pub(crate) fn database_error(context: &str, error: sqlx::Error) -> Error {
    oncebox_sqlx::database_error::<MySqlServerErrors>(context, error)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_timeouts_and_lock_errors_are_temporary() {
        assert!(database_error("claiming", sqlx::Error::PoolTimedOut).is_temporary());
        assert!(is_temporary_number(1213) && is_temporary_number(1205));
        assert!(!is_temporary_number(DUPLICATE_KEY));
    }
}
