//! The oncebox conformance suites against MySQL or MariaDB, at the URL in `ONCEBOX_MYSQL_URL`
//! (e.g. `mysql://root@127.0.0.1:3306/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use oncebox_core::{Dialect, Result, TableNames};
use oncebox_mysql::{MySqlDialect, MySqlQueries, connect_options, pool_options};
use oncebox_sqlx::SqlxStore;
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{SqlxBackend, SqlxHarness, sql_error};
use oncebox_testkit::{dao_suite, engine_suite};

#[path = "conformance/mysql_cases.rs"]
mod mysql_cases;

/// Fresh table prefixes in one MySQL/MariaDB database.
pub struct MySqlBackend {
    url: String,
}

/// The MySQL harness of the suites.
pub type MySqlHarness = SqlxHarness<MySqlBackend>;

impl MySqlBackend {
    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[async_trait]
impl SqlxBackend for MySqlBackend {
    type Queries = MySqlQueries;
    type Dialect = MySqlDialect;

    const ID_IN_LIST: &'static str = "id IN (?2)";
    const SET_HEADERS: &'static str = "headers = ?1 WHERE id = ?2";

    fn store(dialect: &MySqlDialect) -> &SqlxStore<MySqlQueries> {
        dialect.store()
    }

    fn earlier(column: &str) -> String {
        // NULL stays NULL: NULL minus an interval is NULL.
        format!("{column} = {column} - INTERVAL ?1 MICROSECOND")
    }

    /// A pool made by the library's pool options.
    async fn connect(&self, prefix: &str, pool_size: u32) -> Result<MySqlDialect> {
        let pool = pool_options()
            .max_connections(pool_size)
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(sql_error("connecting"))?;
        Ok(MySqlDialect::new(pool).with_tables(&TableNames::with_prefix(prefix)?))
    }
}

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_MYSQL_URL") else {
        return server_missing("mysql conformance", "ONCEBOX_MYSQL_URL");
    };
    let harness = Arc::new(SqlxHarness(MySqlBackend { url }));
    Suite::new()
        .add("dao", harness.clone(), dao_suite::cases())
        .add("engine", harness.clone(), engine_suite::cases())
        .add("mysql", harness, mysql_cases::cases())
        .run()
}
