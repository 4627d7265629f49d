//! Connection settings used by [`PgDialect::connect`](crate::PgDialect::connect).

use std::str::FromStr;

use oncebox_core::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Connections the pool opens at most by default. A draining relay holds up to
/// 2 × min(`thread-pool-size`, event types) of them (a claim ahead beside a settle per poller), so
/// at `thread-pool-size` 5 it can take all ten: an application sharing this pool should size it as
/// `docs/postgres.md` ("Pool sizing") says, or give the relay its own. The wake-up listener has its
/// own connection.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// Connect options for a `postgres://` or `postgresql://` URL. The error never repeats the URL,
/// which may hold a password.
pub fn connect_options(url: &str) -> Result<PgConnectOptions> {
    PgConnectOptions::from_str(url).map_err(|error| {
        Error::invalid_input("the database URL is not a valid PostgreSQL URL").with_source(error)
    })
}

/// Pool settings for [`PgDialect::connect`](crate::PgDialect::connect).
pub(crate) fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().max_connections(DEFAULT_MAX_CONNECTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_and_bad_ones_refused_without_echo() {
        let options = connect_options("postgres://app:secret@db.internal:5433/orders");
        assert_eq!(options.as_ref().map(|o| o.get_port()).ok(), Some(5433));
        let error =
            connect_options("mysql://app:secret@db/orders").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!error.contains("secret"), "{error}");
    }
}
