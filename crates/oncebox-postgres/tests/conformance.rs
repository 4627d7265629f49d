//! The oncebox conformance suites against PostgreSQL, at the URL in `ONCEBOX_PG_URL` (e.g.
//! `postgres://postgres@127.0.0.1:5432/test`). Every test gets its own random table prefix, and its
//! tables are dropped at the end.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{
    Dialect, Error, InboxWriter, NewOutboxEvent, OutboxWriter, Result, SchemaPlan, TableNames,
};
use oncebox_postgres::{PgDialect, connect_options};
use oncebox_testkit::runner::{Suite, server_missing};
use oncebox_testkit::sqlx_harness::{begin, drop_tables, end, sql_error};
use oncebox_testkit::{AgedTable, DaoHarness, dao_suite, engine_suite, random_prefix};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

#[path = "conformance/pg_cases.rs"]
mod pg_cases;

/// Connections per test dialect: enough for the concurrent cases, few enough that two tests at a
/// time stay far below the server's limit.
const POOL_SIZE: u32 = 8;

/// Connections of each further instance over a test's tables: the cases run up to four instances
/// beside the test's own pool.
const INSTANCE_POOL_SIZE: u32 = 4;

/// Fresh table prefixes in one PostgreSQL database.
pub struct PgHarness {
    url: String,
}

impl PgHarness {
    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A dialect on a new pool, using `prefix`, with no tables created.
    pub async fn dialect(&self, prefix: &str, pool_size: u32) -> Result<PgDialect> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(sql_error("connecting"))?;
        Ok(PgDialect::new(pool).with_tables(&TableNames::with_prefix(prefix)?))
    }

    /// Drops the tables of `dialect`'s prefix.
    pub async fn drop_tables(&self, dialect: &PgDialect) -> Result<()> {
        drop_tables(dialect.pool(), dialect.tables()).await
    }
}

#[async_trait]
impl DaoHarness for PgHarness {
    type Dialect = PgDialect;

    async fn fresh(&self) -> Result<PgDialect> {
        let dialect = self.dialect(&random_prefix(), POOL_SIZE).await?;
        dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
        Ok(dialect)
    }

    async fn publish(&self, dialect: &PgDialect, events: &[NewOutboxEvent], commit: bool) -> Result<()> {
        let mut tx = begin(dialect.pool()).await?;
        dialect.writer().write(&mut tx, events).await?;
        end(tx, commit).await
    }

    async fn record_in_transaction(
        &self,
        dialect: &PgDialect,
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

    async fn execute_sql(&self, dialect: &PgDialect, sql: &str) -> Result<()> {
        let sql = dialect.tables().render(sql);
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(dialect.pool()).await.map_err(sql_error("executing"))?;
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

    async fn dispose(&self, dialect: PgDialect) -> Result<()> {
        let dropped = self.drop_tables(&dialect).await;
        dialect.pool().close().await;
        dropped
    }

    async fn another_instance(&self, dialect: &PgDialect) -> Result<Option<PgDialect>> {
        Ok(Some(self.dialect(dialect.tables().prefix(), INSTANCE_POOL_SIZE).await?))
    }

    async fn close_instance(&self, instance: PgDialect) -> Result<()> {
        instance.pool().close().await;
        Ok(())
    }
}

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_PG_URL") else {
        return server_missing("postgres conformance", "ONCEBOX_PG_URL");
    };
    let harness = Arc::new(PgHarness { url });
    Suite::new()
        .add("dao", harness.clone(), dao_suite::cases())
        .add("engine", harness.clone(), engine_suite::cases())
        .add("postgres", harness, pg_cases::cases())
        .run()
}
