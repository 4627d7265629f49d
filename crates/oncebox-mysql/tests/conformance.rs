//! The oncebox conformance suites against MySQL or MariaDB, at the URL in `ONCEBOX_MYSQL_URL`
//! (e.g. `mysql://root@127.0.0.1:3306/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Dialect, Error, Result, TableNames};
use oncebox_mysql::{MySqlDialect, connect_options, pool_options};
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{SqlxBackend, SqlxHarness, sql_error};
use oncebox_testkit::{AgedTable, dao_suite, engine_suite};
use sqlx::{AssertSqlSafe, MySql, MySqlPool};
use uuid::Uuid;

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
    type Db = MySql;
    type Dialect = MySqlDialect;

    fn pool(dialect: &MySqlDialect) -> &MySqlPool {
        dialect.pool()
    }

    fn tables(dialect: &MySqlDialect) -> &TableNames {
        dialect.tables()
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

    async fn backdate(
        &self,
        dialect: &MySqlDialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()> {
        // NULL stays NULL: NULL minus an interval is NULL.
        let filter = if table.keyed_by_id() && !ids.is_empty() {
            format!("id IN ({})", vec!["?"; ids.len()].join(", "))
        } else {
            "TRUE".to_owned()
        };
        let sql = table.backdate_statement(
            dialect.tables(),
            |column| format!("{column} = {column} - INTERVAL ? MICROSECOND"),
            &filter,
        );
        let micros = i64::try_from(by.as_micros()).map_err(|_| Error::invalid_input("backdate too far"))?;
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for _ in table.timestamps() {
            query = query.bind(micros);
        }
        if table.keyed_by_id() {
            for id in ids {
                query = query.bind(*id);
            }
        }
        query.execute(dialect.pool()).await.map_err(sql_error("backdating"))?;
        Ok(())
    }

    async fn overwrite_headers(
        &self,
        dialect: &MySqlDialect,
        table: AgedTable,
        id: Uuid,
        text: &str,
    ) -> Result<()> {
        let sql = format!("UPDATE {} SET headers = ? WHERE id = ?", table.name(dialect.tables()));
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
