//! Connection settings, the session every library connection runs in, and the start-up check of
//! the server.

use std::str::FromStr;

use oncebox_core::{Error, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{Executor, MySqlPool};

use crate::error::SqlxResultExt;

/// Connections the pool opens at most by default. A draining relay holds up to
/// 2 × min(`thread-pool-size`, event types) of them (a claim ahead beside a settle per poller), so
/// at `thread-pool-size` 5 it can take all ten: an application sharing this pool should size it as
/// `docs/mysql.md` ("Pool sizing") says, or give the relay its own.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// Set on every connection of a pool made by [`pool_options`]: READ COMMITTED takes no gap
/// locks, so a claim's `FOR UPDATE` cannot block or deadlock with the inserts of business
/// transactions (REPEATABLE READ, the InnoDB default, would lock the gaps around every scanned
/// row). Strict mode makes a value that does not fit an error instead of a silent truncation.
pub const SESSION_SETUP: [&str; 2] = [
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES')",
];

/// Connect options for a `mysql://` or `mariadb://` URL. The error never repeats the URL, which may
/// hold a password.
pub fn connect_options(url: &str) -> Result<MySqlConnectOptions> {
    // sqlx knows only the `mysql` scheme; MariaDB users often write the other one.
    let url = url.strip_prefix("mariadb://").map_or_else(|| url.to_owned(), |rest| format!("mysql://{rest}"));
    MySqlConnectOptions::from_str(&url).map_err(|error| {
        Error::invalid_input("the database URL is not a valid MySQL/MariaDB URL").with_source(error)
    })
}

/// Pool settings for the relay: at most [`DEFAULT_MAX_CONNECTIONS`], and every connection starts by
/// running [`SESSION_SETUP`]. Build your own pool from these options when you pass one to
/// [`MySqlDialect::new`](crate::MySqlDialect::new).
pub fn pool_options() -> MySqlPoolOptions {
    MySqlPoolOptions::new().max_connections(DEFAULT_MAX_CONNECTIONS).after_connect(|connection, _meta| {
        Box::pin(async move {
            for statement in SESSION_SETUP {
                connection.execute(statement).await?;
            }
            Ok(())
        })
    })
}

/// The server's kind and version, as read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `true` for MariaDB, `false` for MySQL.
    pub mariadb: bool,
    /// Major, minor and patch version.
    pub version: (u32, u32, u32),
    /// The full `VERSION()` text.
    pub text: String,
}

impl ServerVersion {
    /// Parses `VERSION()`: `8.0.36`, `8.4.0-commercial`, `10.11.6-MariaDB-0+deb12u1` or (behind old
    /// replication proxies) `5.5.5-10.11.6-MariaDB`.
    pub fn parse(text: &str) -> Option<Self> {
        let mariadb = text.contains("MariaDB");
        let numbers = text.strip_prefix("5.5.5-").filter(|_| mariadb).unwrap_or(text);
        let core = numbers.split(['-', '+', ' ']).next()?;
        let mut parts = core.split('.').map(|part| part.parse::<u32>().ok());
        let version = (parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0));
        Some(Self { mariadb, version, text: text.to_owned() })
    }

    /// Whether the server has `FOR UPDATE SKIP LOCKED`: MySQL 8.0.1 and MariaDB 10.6 added it.
    pub fn supports_skip_locked(&self) -> bool {
        if self.mariadb { self.version >= (10, 6, 0) } else { self.version >= (8, 0, 1) }
    }

    /// The session variable holding the isolation level (MariaDB 10.11 still calls it
    /// `tx_isolation`; MySQL 8 renamed it).
    pub fn isolation_variable(&self) -> &'static str {
        if self.mariadb { "@@SESSION.tx_isolation" } else { "@@SESSION.transaction_isolation" }
    }
}

/// Reads the server version and refuses a server without SKIP LOCKED, which would otherwise wait on
/// every locked row and starve the other instances; warns when the pool's sessions do not run at
/// READ COMMITTED.
pub(crate) async fn check_server(pool: &MySqlPool) -> Result<ServerVersion> {
    let context = "checking the MySQL/MariaDB server";
    let mut connection = pool.acquire().await.context(context)?;
    let (text,): (String,) =
        sqlx::query_as("SELECT VERSION()").fetch_one(&mut *connection).await.context(context)?;
    let server = ServerVersion::parse(&text)
        .ok_or_else(|| Error::invalid_input(format!("cannot read the server version '{text}'")))?;
    if !server.supports_skip_locked() {
        return Err(Error::invalid_input(format!(
            "the server is {text}; oncebox needs FOR UPDATE SKIP LOCKED, which MySQL has from 8.0.1 and \
             MariaDB from 10.6"
        )));
    }
    let query = format!("SELECT {}", server.isolation_variable());
    let (isolation,): (String,) =
        sqlx::query_as(sqlx::AssertSqlSafe(query)).fetch_one(&mut *connection).await.context(context)?;
    if isolation != "READ-COMMITTED" {
        tracing::warn!(
            isolation = %isolation,
            "the pool's sessions run at {isolation}, not READ COMMITTED: claims take gap locks that can \
             block and deadlock business transactions; build the pool from oncebox_mysql::pool_options()"
        );
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_and_bad_ones_refused_without_echo() {
        let options = connect_options("mysql://app:secret@db.internal:3307/orders");
        assert_eq!(options.as_ref().map(|o| o.get_port()).ok(), Some(3307));
        let maria = connect_options("mariadb://app@db/orders");
        assert_eq!(
            maria.as_ref().map(|o| o.get_database().map(str::to_owned)).ok(),
            Some(Some("orders".into()))
        );
        let error = connect_options("postgres://app:secret@db/orders")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!error.contains("secret"), "{error}");
    }

    #[test]
    fn versions_are_parsed_and_old_servers_refused() {
        let maria = ServerVersion::parse("10.11.19-MariaDB-0+deb12u1");
        assert_eq!(maria.as_ref().map(|v| (v.mariadb, v.version)), Some((true, (10, 11, 19))));
        assert!(maria.is_some_and(|v| v.supports_skip_locked()));
        let proxied = ServerVersion::parse("5.5.5-10.5.2-MariaDB");
        assert_eq!(proxied.as_ref().map(|v| v.version), Some((10, 5, 2)));
        assert!(proxied.is_some_and(|v| !v.supports_skip_locked()));
        let mysql = ServerVersion::parse("8.0.36");
        assert!(mysql.as_ref().is_some_and(|v| !v.mariadb && v.supports_skip_locked()));
        assert_eq!(mysql.map(|v| v.isolation_variable()), Some("@@SESSION.transaction_isolation"));
        assert!(ServerVersion::parse("8.0.0-dmr").is_some_and(|v| !v.supports_skip_locked()));
        assert!(ServerVersion::parse("5.7.44-log").is_some_and(|v| !v.supports_skip_locked()));
        assert_eq!(ServerVersion::parse("garbage"), None);
    }
}
