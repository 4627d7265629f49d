//! The oncebox conformance suites against MySQL or MariaDB, at the URL in `ONCEBOX_MYSQL_URL`
//! (e.g. `mysql://root@127.0.0.1:3306/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{
    Dialect, Error, InboxWriter, NewOutboxEvent, OutboxWriter, Result, SchemaPlan, TableNames,
};
use oncebox_mysql::{MySqlDialect, connect_options, pool_options};
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{begin, drop_tables, end, sql_error};
use oncebox_testkit::{AgedTable, DaoHarness, dao_suite, engine_suite, random_prefix};
use sqlx::AssertSqlSafe;
use uuid::Uuid;

#[path = "conformance/mysql_cases.rs"]
mod mysql_cases;

/// Connections per test dialect: enough for the concurrent cases, few enough that two tests at a
/// time stay far below the server's limit (151 by default).
const POOL_SIZE: u32 = 8;

/// Connections of each further instance over a test's tables: the cases run up to four instances
/// beside the test's own pool.
const INSTANCE_POOL_SIZE: u32 = 4;

/// Fresh table prefixes in one MySQL/MariaDB database.
pub struct MySqlHarness {
    url: String,
}

impl MySqlHarness {
    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A dialect on a new pool made by the library's pool options, using `prefix`, with no tables
    /// created.
    pub async fn dialect(&self, prefix: &str, pool_size: u32) -> Result<MySqlDialect> {
        let pool = pool_options()
            .max_connections(pool_size)
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(sql_error("connecting"))?;
        Ok(MySqlDialect::new(pool).with_tables(&TableNames::with_prefix(prefix)?))
    }

    /// Drops the tables of `dialect`'s prefix.
    pub async fn drop_tables(&self, dialect: &MySqlDialect) -> Result<()> {
        drop_tables(dialect.pool(), dialect.tables()).await
    }
}

#[async_trait]
impl DaoHarness for MySqlHarness {
    type Dialect = MySqlDialect;

    async fn fresh(&self) -> Result<MySqlDialect> {
        let dialect = self.dialect(&random_prefix(), POOL_SIZE).await?;
        dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
        Ok(dialect)
    }

    async fn publish(&self, dialect: &MySqlDialect, events: &[NewOutboxEvent], commit: bool) -> Result<()> {
        let mut tx = begin(dialect.pool()).await?;
        dialect.writer().write(&mut tx, events).await?;
        end(tx, commit).await
    }

    async fn record_in_transaction(
        &self,
        dialect: &MySqlDialect,
        consumer: &str,
        ids: &[Uuid],
        commit: bool,
    ) -> Result<Vec<Uuid>> {
        let mut tx = begin(dialect.pool()).await?;
        let new = dialect.writer().record_many(&mut tx, consumer, ids).await?;
        end(tx, commit).await?;
        Ok(new)
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

    async fn execute_sql(&self, dialect: &MySqlDialect, sql: &str) -> Result<()> {
        let sql = dialect.tables().render(sql);
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(dialect.pool()).await.map_err(sql_error("executing"))?;
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

    async fn dispose(&self, dialect: MySqlDialect) -> Result<()> {
        let dropped = self.drop_tables(&dialect).await;
        dialect.pool().close().await;
        dropped
    }

    async fn another_instance(&self, dialect: &MySqlDialect) -> Result<Option<MySqlDialect>> {
        Ok(Some(self.dialect(dialect.tables().prefix(), INSTANCE_POOL_SIZE).await?))
    }

    async fn close_instance(&self, instance: MySqlDialect) -> Result<()> {
        instance.pool().close().await;
        Ok(())
    }
}

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_MYSQL_URL") else {
        return server_missing("mysql conformance", "ONCEBOX_MYSQL_URL");
    };
    let harness = Arc::new(MySqlHarness { url });
    Suite::new()
        .add("dao", harness.clone(), dao_suite::cases())
        .add("engine", harness.clone(), engine_suite::cases())
        .add("mysql", harness, mysql_cases::cases())
        .run()
}
