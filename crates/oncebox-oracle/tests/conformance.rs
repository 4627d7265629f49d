//! The oncebox conformance suites against Oracle, at the URL in `ONCEBOX_ORACLE_URL` (e.g.
//! `oracle://oncebox:oncebox@127.0.0.1:1521/FREEPDB1`; docs/oracle.md says how to start Oracle
//! Database Free). Every test gets its own random table prefix, and its tables are dropped at the
//! end. Without the variable the suite says loudly that it did not run, also under `CI=true`:
//! no CI machine of this project has an Oracle server.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{
    Dialect, Error, InboxWriter, NewOutboxEvent, OutboxWriter, Result, SchemaPlan, StoredInboxTransactions,
    TableNames,
};
use oncebox_oracle::oracle::sql_type::ToSql;
use oncebox_oracle::{OraConnectOptions, OraDialect};
use oncebox_testkit::runner::{Suite, server_absent_from_ci};
use oncebox_testkit::{AgedTable, DaoHarness, dao_suite, engine_suite, random_prefix};
use uuid::Uuid;

/// Connections per test dialect: enough for the concurrent cases.
const POOL_SIZE: u32 = 8;

/// Connections of each further instance over a test's tables.
const INSTANCE_POOL_SIZE: u32 = 4;

/// Fresh table prefixes in one Oracle schema.
struct OraHarness {
    options: OraConnectOptions,
}

fn oracle_error(context: &'static str) -> impl FnOnce(oncebox_oracle::oracle::Error) -> Error {
    move |error| Error::database(context, false, error)
}

impl OraHarness {
    /// A dialect on a new pool, using `prefix`, with no tables created.
    async fn dialect(&self, prefix: &str, pool_size: u32) -> Result<OraDialect> {
        let options = OraConnectOptions { max_connections: pool_size, ..self.options.clone() };
        Ok(OraDialect::connect_with(options).await?.with_tables(&TableNames::with_prefix(prefix)?))
    }

    /// Runs `work` on a connection of `dialect`'s pool, committing after it.
    async fn on_pool<F>(dialect: &OraDialect, context: &'static str, work: F) -> Result<()>
    where
        F: FnOnce(&oncebox_oracle::oracle::Connection) -> oncebox_oracle::oracle::Result<()> + Send + 'static,
    {
        let pool = dialect.pool().clone();
        tokio::task::spawn_blocking(move || {
            let connection = pool.get()?;
            work(&connection)?;
            connection.commit()
        })
        .await
        .map_err(|error| Error::database(context, false, error))?
        .map_err(oracle_error(context))
    }
}

#[async_trait]
impl DaoHarness for OraHarness {
    type Dialect = OraDialect;

    async fn fresh(&self) -> Result<OraDialect> {
        let dialect = self.dialect(&random_prefix(), POOL_SIZE).await?;
        dialect.create_schema(SchemaPlan::ALL).await?;
        Ok(dialect)
    }

    async fn publish(&self, dialect: &OraDialect, events: &[NewOutboxEvent], commit: bool) -> Result<()> {
        let mut tx = dialect.begin().await?;
        dialect.writer().write(&mut tx, events).await?;
        if commit { tx.commit().await } else { tx.rollback().await }
    }

    async fn record_in_transaction(
        &self,
        dialect: &OraDialect,
        consumer: &str,
        ids: &[Uuid],
        commit: bool,
    ) -> Result<Vec<Uuid>> {
        let mut tx = dialect.begin().await?;
        let new = dialect.writer().record_many(&mut tx, consumer, ids).await?;
        if commit {
            tx.commit().await?
        } else {
            tx.rollback().await?
        }
        Ok(new)
    }

    async fn finish_stored_in_transaction(
        &self,
        dialect: &OraDialect,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        commit: bool,
    ) -> Result<bool> {
        let mut tx = dialect.begin().await?;
        let finished = dialect.finish_in(&mut tx, consumer, id, token).await?;
        if commit {
            tx.commit().await?
        } else {
            tx.rollback().await?
        }
        Ok(finished)
    }

    async fn backdate(
        &self,
        dialect: &OraDialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()> {
        // NULL stays NULL: NULL minus an interval is NULL. Every table but the jobs' has an `id`
        // column (the durable inbox's with the consumer in its key: an id stored for two
        // consumers moves for both).
        let names: Vec<String> = (0..ids.len()).map(|index| format!("id{index}")).collect();
        let filter = if table.keyed_by_id() && !ids.is_empty() {
            let list: Vec<String> = names.iter().map(|name| format!(":{name}")).collect();
            format!("id IN ({})", list.join(", "))
        } else {
            "1 = 1".to_owned()
        };
        let sql = table.backdate_statement(
            dialect.tables(),
            |column| format!("{column} = {column} - NUMTODSINTERVAL(:micros / 1000000, 'SECOND')"),
            &filter,
        );
        let micros = i64::try_from(by.as_micros()).map_err(|_| Error::invalid_input("backdate too far"))?;
        let ids: Vec<Vec<u8>> = if table.keyed_by_id() {
            ids.iter().map(|id| id.as_bytes().to_vec()).collect()
        } else {
            Vec::new()
        };
        Self::on_pool(dialect, "backdating", move |connection| {
            let mut binds: Vec<(&str, &dyn ToSql)> = vec![("micros", &micros)];
            binds.extend(names.iter().map(String::as_str).zip(ids.iter().map(|id| id as &dyn ToSql)));
            connection.execute_named(&sql, &binds).map(drop)
        })
        .await
    }

    async fn execute_sql(&self, dialect: &OraDialect, sql: &str) -> Result<()> {
        let sql = dialect.tables().render(sql);
        Self::on_pool(dialect, "executing", move |connection| connection.execute(&sql, &[]).map(drop)).await
    }

    async fn overwrite_headers(
        &self,
        dialect: &OraDialect,
        table: AgedTable,
        id: Uuid,
        text: &str,
    ) -> Result<()> {
        let sql = format!("UPDATE {} SET headers = :headers WHERE id = :id", table.name(dialect.tables()));
        let text = text.to_owned();
        let id = id.as_bytes().to_vec();
        Self::on_pool(dialect, "overwriting headers", move |connection| {
            connection.execute_named(&sql, &[("headers", &text), ("id", &id)]).map(drop)
        })
        .await
    }

    async fn dispose(&self, dialect: OraDialect) -> Result<()> {
        let tables = dialect.tables();
        let names = [tables.events(), tables.dlq(), tables.consumed(), tables.inbox(), tables.jobs()]
            .map(str::to_owned);
        Self::on_pool(&dialect, "dropping", move |connection| {
            for name in names {
                // ORA-00942: the table does not exist (a case that never created it).
                match connection.execute(&format!("DROP TABLE {name} PURGE"), &[]) {
                    Err(error) if error.oci_code() != Some(942) => return Err(error),
                    _ => {}
                }
            }
            Ok(())
        })
        .await
    }

    async fn another_instance(&self, dialect: &OraDialect) -> Result<Option<OraDialect>> {
        Ok(Some(self.dialect(dialect.tables().prefix(), INSTANCE_POOL_SIZE).await?))
    }
}

fn main() -> ExitCode {
    let dao = dao_suite::cases::<OraHarness>();
    let engine = engine_suite::cases::<OraHarness>();
    let Ok(url) = std::env::var("ONCEBOX_ORACLE_URL") else {
        return server_absent_from_ci(
            "oracle conformance",
            "ONCEBOX_ORACLE_URL",
            &[("dao", dao.len()), ("engine", engine.len())],
        );
    };
    let options = match OraConnectOptions::from_url(&url) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("FAILED: oracle conformance: {error}");
            return ExitCode::FAILURE;
        }
    };
    let harness = Arc::new(OraHarness { options });
    Suite::new().add("dao", harness.clone(), dao).add("engine", harness, engine).run()
}
