//! Turns sqlx errors into the oncebox error at the crate boundary, deciding which are temporary.

use oncebox_sqlx::ServerErrors;
pub(crate) use oncebox_sqlx::SqlxResultExt;
use sqlx::error::DatabaseError;

/// SQLSTATE classes after which trying again later may succeed: connection exceptions (08),
/// transaction rollbacks such as serialization failures and deadlocks (40), insufficient resources
/// (53), operator intervention such as an administrator shutdown or a server still starting (57)
/// and system errors (58).
const TEMPORARY_CLASSES: &[&str] = &["08", "40", "53", "57", "58"];
/// Single SQLSTATE codes outside those classes that are temporary: lock not available (55P03, e.g.
/// after `lock_timeout`).
const TEMPORARY_CODES: &[&str] = &["55P03"];

/// PostgreSQL's reading of its SQLSTATE codes, for the error mapping shared by the sqlx dialects.
pub(crate) struct PgServerErrors;

impl ServerErrors for PgServerErrors {
    fn is_temporary(error: &(dyn DatabaseError + 'static)) -> bool {
        error.code().is_some_and(|code| is_temporary_code(&code))
    }
}

/// Every `.context(…)` on a sqlx result in this crate classifies with [`PgServerErrors`].
impl<T> SqlxResultExt<PgServerErrors, T> for sqlx::Result<T> {}

/// Whether an SQLSTATE names a failure that may pass.
fn is_temporary_code(code: &str) -> bool {
    TEMPORARY_CODES.contains(&code) || TEMPORARY_CLASSES.iter().any(|class| code.starts_with(class))
}

/// Wraps a tokio-postgres error with `context`: temporary when the connection is gone or the
/// SQLSTATE says so.
#[cfg(feature = "tokio-postgres")]
pub(crate) fn tokio_postgres_error(context: &str, error: tokio_postgres::Error) -> oncebox_core::Error {
    let temporary = error.is_closed() || error.code().is_some_and(|code| is_temporary_code(code.code()));
    oncebox_core::Error::database(context.to_owned(), temporary, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_lock_and_resource_states_are_temporary() {
        assert!(is_temporary_code("40001") && is_temporary_code("08006") && is_temporary_code("55P03"));
        assert!(!is_temporary_code("23505") && !is_temporary_code("42P01"));
    }
}
