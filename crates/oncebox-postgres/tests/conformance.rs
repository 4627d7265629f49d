//! The oncebox conformance suites against PostgreSQL, at the URL in `ONCEBOX_PG_URL` (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Dialect, Error, Result, TableNames};
use oncebox_postgres::{PgDialect, connect_options};
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{SqlxBackend, SqlxHarness, sql_error};
use oncebox_testkit::{AgedTable, dao_suite, engine_suite};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres};
use uuid::Uuid;

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
    type Db = Postgres;
    type Dialect = PgDialect;

    fn pool(dialect: &PgDialect) -> &PgPool {
        dialect.pool()
    }

    fn tables(dialect: &PgDialect) -> &TableNames {
        dialect.tables()
    }

    async fn connect(&self, prefix: &str, pool_size: u32) -> Result<PgDialect> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(sql_error("connecting"))?;
        Ok(PgDialect::new(pool).with_tables(&TableNames::with_prefix(prefix)?))
    }

    async fn backdate(
        &self,
        dialect: &PgDialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()> {
        // NULL stays NULL: NULL minus an interval is NULL.
        let filter = if table.keyed_by_id() { "cardinality($2) = 0 OR id = ANY($2)" } else { "TRUE" };
        let sql = table.backdate_statement(
            dialect.tables(),
            |column| format!("{column} = {column} - $1 * INTERVAL '1 microsecond'"),
            filter,
        );
        let micros = i64::try_from(by.as_micros()).map_err(|_| Error::invalid_input("backdate too far"))?;
        let query = sqlx::query(AssertSqlSafe(sql)).bind(micros);
        let query = if table.keyed_by_id() { query.bind(ids) } else { query };
        query.execute(dialect.pool()).await.map_err(sql_error("backdating"))?;
        Ok(())
    }

    async fn overwrite_headers(
        &self,
        dialect: &PgDialect,
        table: AgedTable,
        id: Uuid,
        text: &str,
    ) -> Result<()> {
        let sql = format!("UPDATE {} SET headers = $1::jsonb WHERE id = $2", table.name(dialect.tables()));
        sqlx::query(AssertSqlSafe(sql))
            .bind(text.to_owned())
            .bind(id)
            .execute(dialect.pool())
            .await
            .map_err(sql_error("overwriting headers"))?;
        Ok(())
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
