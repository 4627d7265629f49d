//! The oncebox conformance suites against PostgreSQL, at the URL in `ONCEBOX_PG_URL` (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use oncebox_core::{Dialect, Result, TableNames};
use oncebox_postgres::{PgDialect, PgQueries, connect_options};
use oncebox_sqlx::SqlxStore;
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{SqlxBackend, SqlxHarness, sql_error};
use oncebox_testkit::{dao_suite, engine_suite};
use sqlx::postgres::PgPoolOptions;

#[path = "conformance/pg_cases.rs"]
mod pg_cases;

/// Fresh table prefixes in one PostgreSQL database.
pub struct PgBackend {
    url: String,
}

/// The PostgreSQL harness of the suites.
pub type PgHarness = SqlxHarness<PgBackend>;

impl PgBackend {
    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[async_trait]
impl SqlxBackend for PgBackend {
    type Queries = PgQueries;
    type Dialect = PgDialect;

    const ID_IN_LIST: &'static str = "id = ANY($2)";
    const SET_HEADERS: &'static str = "headers = $1::jsonb WHERE id = $2";

    fn store(dialect: &PgDialect) -> &SqlxStore<PgQueries> {
        dialect.store()
    }

    fn earlier(column: &str) -> String {
        // NULL stays NULL: NULL minus an interval is NULL.
        format!("{column} = {column} - $1 * INTERVAL '1 microsecond'")
    }

    async fn connect(&self, prefix: &str, pool_size: u32) -> Result<PgDialect> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(sql_error("connecting"))?;
        Ok(PgDialect::new(pool).with_tables(&TableNames::with_prefix(prefix)?))
    }
}

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_PG_URL") else {
        return server_missing("postgres conformance", "ONCEBOX_PG_URL");
    };
    let harness = Arc::new(SqlxHarness(PgBackend { url }));
    Suite::new()
        .add("dao", harness.clone(), dao_suite::cases())
        .add("engine", harness.clone(), engine_suite::cases())
        .add("postgres", harness, pg_cases::cases())
        .run()
}
