//! The SQL side of a suite, one [`Store`] per dialect: instances over one run's tables, the business
//! writes that publish in the caller's transaction, the effect applied through the inbox, and the
//! counts the accounting reads.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use oncebox::mysql::MySqlDialect;
use oncebox::postgres::PgDialect;
use oncebox::sqlite::SqliteDialect;
use oncebox::{Consumed, Dialect, Error, ErrorKind, Inbox, Oncebox, Result};
use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::fresh_name;

/// The business payload of the suites: an order and its total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Order number, unique within a run (the business table's primary key).
    pub order: i64,
    /// Total in cents.
    pub total_cents: i64,
}

/// The names one run uses, fresh for every run so concurrent runs never meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The oncebox table prefix (`oncebox.tables.prefix`); the business tables share it.
    pub prefix: String,
    /// The business table the publishers write.
    pub orders: String,
    /// The consumer's effects: one row per applied event.
    pub effects: String,
    /// The Kafka topic or RabbitMQ exchange the event type is relayed to.
    pub destination: String,
    /// The Kafka consumer group or RabbitMQ queue of the listener.
    pub consumer: String,
}

impl Names {
    /// Fresh names for one run; `tag` (e.g. `pg_kafka`) makes leftovers recognisable.
    pub fn fresh(tag: &str) -> Self {
        let prefix = format!("{}_", fresh_name("m"));
        Self {
            orders: format!("{prefix}orders"),
            effects: format!("{prefix}effects"),
            destination: fresh_name(&format!("oncebox_matrix_{tag}")),
            consumer: fresh_name(&format!("oncebox_matrix_{tag}_effects")),
            prefix,
        }
    }

    /// The oncebox tables of the run, as the facade names them from the prefix.
    pub fn outbox_tables(&self) -> Result<oncebox_core::TableNames> {
        oncebox_core::TableNames::with_prefix(&self.prefix)
    }
}

/// The inbox type the facade hands out for a store's dialect.
pub type StoreInbox<S> = Inbox<Arc<<<S as Store>::Dialect as Dialect>::Writer>>;

/// One SQL database under test, named by an environment variable (SQLite needs none: a temp file).
pub trait Store: Sized + Send + Sync + 'static {
    /// The dialect the facade is built with.
    type Dialect: Dialect + Clone + Send + Sync + 'static;

    /// Short name used in test names (`postgres`, `mysql`, `sqlite`).
    const NAME: &'static str;
    /// The variable naming the server, or `None` when the store needs no server.
    const VARIABLE: Option<&'static str>;
    /// How many relay instances the suites run on one run's tables: two for servers, where each
    /// instance has its own pool as a second process would; one for the single-process SQLite.
    const RELAYS: usize;

    /// The store configured by the environment, `None` when its variable is not set.
    fn from_env(names: &Names) -> Option<Self>;

    /// A new dialect over the store's database, on a pool of its own.
    fn open(&self) -> impl Future<Output = Result<Self::Dialect>> + Send;

    /// Creates the business tables `names.orders` and `names.effects`.
    fn create_business_tables(
        &self,
        dialect: &Self::Dialect,
        names: &Names,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Inserts `orders` into the business table and publishes their events (`publish` for one,
    /// `publish_all` for several) in one transaction, then commits it or rolls it back. Returns
    /// the event ids.
    fn place(
        outbox: &Oncebox<Self::Dialect>,
        names: &Names,
        event_type: &str,
        orders: &[Order],
        commit: bool,
    ) -> impl Future<Output = Result<Vec<Uuid>>> + Send;

    /// Applies event `id` through `inbox`, transactionally: the inbox record and the effect row
    /// commit together; a duplicate commits nothing new. With `fail`, the effect writes its row
    /// and then fails, so the transaction (record included) is rolled back and the error returned.
    fn apply(
        dialect: &Self::Dialect,
        inbox: &StoreInbox<Self>,
        names: &Names,
        id: Uuid,
        fail: bool,
    ) -> impl Future<Output = Result<Consumed<()>>> + Send;

    /// The effects table grouped by event id: `(event id, rows)`.
    fn effects(
        dialect: &Self::Dialect,
        names: &Names,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// Outbox rows by status: `(status, rows)`.
    fn outbox_statuses(
        dialect: &Self::Dialect,
        names: &Names,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// Removes what the run created: its tables, or the database file.
    fn dispose(&self, dialect: &Self::Dialect, names: &Names) -> impl Future<Output = Result<()>> + Send;
}

fn database_error(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |error| Error::database(context, false, error)
}

/// The three stores take the same SQL but for their placeholders, so one body serves them all.
macro_rules! sql_store_operations {
    ($dialect:ty, $database:ty, $insert_order:literal, $insert_effect:literal) => {
        type Dialect = $dialect;

        async fn create_business_tables(&self, dialect: &$dialect, names: &Names) -> Result<()> {
            for statement in [
                format!("CREATE TABLE {} (id BIGINT PRIMARY KEY, total_cents BIGINT NOT NULL)", names.orders),
                // No key on purpose: an effect applied twice must show up in the count.
                format!("CREATE TABLE {} (event_id VARCHAR(36) NOT NULL)", names.effects),
            ] {
                sqlx::raw_sql(AssertSqlSafe(statement))
                    .execute(dialect.pool())
                    .await
                    .map_err(database_error("creating the business tables"))?;
            }
            Ok(())
        }

        async fn place(
            outbox: &Oncebox<$dialect>,
            names: &Names,
            event_type: &str,
            orders: &[Order],
            commit: bool,
        ) -> Result<Vec<Uuid>> {
            let mut tx = outbox.dialect().pool().begin().await.map_err(database_error("begin"))?;
            for order in orders {
                sqlx::query(AssertSqlSafe(format!($insert_order, names.orders)))
                    .bind(order.order)
                    .bind(order.total_cents)
                    .execute(&mut *tx)
                    .await
                    .map_err(database_error("inserting an order"))?;
            }
            let ids = match orders {
                [order] => vec![outbox.publisher().publish(&mut tx, event_type, order).await?],
                _ => outbox.publisher().publish_all(&mut tx, event_type, orders).await?,
            };
            if commit {
                tx.commit().await.map_err(database_error("commit"))?;
            } else {
                tx.rollback().await.map_err(database_error("rollback"))?;
            }
            Ok(ids)
        }

        async fn apply(
            dialect: &$dialect,
            inbox: &StoreInbox<Self>,
            names: &Names,
            id: Uuid,
            fail: bool,
        ) -> Result<Consumed<()>> {
            let insert = format!($insert_effect, names.effects);
            let mut tx = dialect.pool().begin().await.map_err(database_error("begin"))?;
            // `Inbox::consume_in`, spelled out: its future with an effect borrowing the transaction
            // fails the `Send` check the listener needs ("implementation of `AsyncFnOnce` is not
            // general enough", a current compiler limitation), so the handler runs `record_in`, the
            // first half of `consume_in` for such callers, and the effect itself.
            if !inbox.record_in(&mut tx, id).await? {
                tx.rollback().await.map_err(database_error("rollback"))?;
                return Ok(Consumed::Duplicate);
            }
            sqlx::query(AssertSqlSafe(insert))
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(database_error("inserting the effect"))?;
            if fail {
                // The record and the effect written above go with the rollback.
                tx.rollback().await.map_err(database_error("rollback"))?;
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("event {id}: the first attempt fails on purpose"),
                ));
            }
            tx.commit().await.map_err(database_error("commit"))?;
            inbox.remember(id).await;
            Ok(Consumed::Applied(()))
        }

        async fn effects(dialect: &$dialect, names: &Names) -> Result<Vec<(String, i64)>> {
            let sql = format!("SELECT event_id, COUNT(*) FROM {} GROUP BY event_id", names.effects);
            sqlx::query_as(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("counting effects"))
        }

        async fn outbox_statuses(dialect: &$dialect, names: &Names) -> Result<Vec<(String, i64)>> {
            let sql = format!(
                "SELECT status, COUNT(*) FROM {} GROUP BY status ORDER BY status",
                names.outbox_tables()?.events()
            );
            sqlx::query_as(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("counting outbox rows"))
        }
    };
}

/// Drops the run's oncebox and business tables, one statement each (SQLite drops one per statement).
async fn drop_tables<'c, E>(executor: E, names: &Names) -> Result<()>
where
    E: sqlx::Executor<'c> + Copy,
{
    let tables = names.outbox_tables()?;
    for table in
        [tables.events(), tables.dlq(), tables.consumed(), tables.jobs(), &names.orders, &names.effects]
    {
        sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
            .execute(executor)
            .await
            .map_err(database_error("dropping the run's tables"))?;
    }
    Ok(())
}

/// PostgreSQL at `ONCEBOX_PG_URL`, tables under a fresh prefix in that database.
pub struct PgStore {
    url: String,
}

impl Store for PgStore {
    const NAME: &'static str = "postgres";
    const VARIABLE: Option<&'static str> = Some("ONCEBOX_PG_URL");
    const RELAYS: usize = 2;

    fn from_env(_names: &Names) -> Option<Self> {
        server_url("ONCEBOX_PG_URL").map(|url| Self { url })
    }

    async fn open(&self) -> Result<PgDialect> {
        PgDialect::connect(&self.url).await
    }

    async fn dispose(&self, dialect: &PgDialect, names: &Names) -> Result<()> {
        drop_tables(dialect.pool(), names).await
    }

    sql_store_operations!(
        PgDialect,
        sqlx::Postgres,
        "INSERT INTO {} (id, total_cents) VALUES ($1, $2)",
        "INSERT INTO {} (event_id) VALUES ($1)"
    );
}

/// MySQL 8 or MariaDB 10.6+ at `ONCEBOX_MYSQL_URL`, tables under a fresh prefix in that database.
pub struct MySqlStore {
    url: String,
}

impl Store for MySqlStore {
    const NAME: &'static str = "mysql";
    const VARIABLE: Option<&'static str> = Some("ONCEBOX_MYSQL_URL");
    const RELAYS: usize = 2;

    fn from_env(_names: &Names) -> Option<Self> {
        server_url("ONCEBOX_MYSQL_URL").map(|url| Self { url })
    }

    async fn open(&self) -> Result<MySqlDialect> {
        MySqlDialect::connect(&self.url).await
    }

    async fn dispose(&self, dialect: &MySqlDialect, names: &Names) -> Result<()> {
        drop_tables(dialect.pool(), names).await
    }

    sql_store_operations!(
        MySqlDialect,
        sqlx::MySql,
        "INSERT INTO {} (id, total_cents) VALUES (?, ?)",
        "INSERT INTO {} (event_id) VALUES (?)"
    );
}

/// SQLite in a fresh file of the temp directory, deleted at the end.
pub struct SqliteStore {
    path: PathBuf,
}

impl Store for SqliteStore {
    const NAME: &'static str = "sqlite";
    const VARIABLE: Option<&'static str> = None;
    const RELAYS: usize = 1;

    fn from_env(names: &Names) -> Option<Self> {
        Some(Self {
            path: std::env::temp_dir().join(format!("oncebox-{}.db", names.prefix.trim_end_matches('_'))),
        })
    }

    async fn open(&self) -> Result<SqliteDialect> {
        SqliteDialect::connect(&self.path.to_string_lossy()).await
    }

    async fn dispose(&self, dialect: &SqliteDialect, _names: &Names) -> Result<()> {
        dialect.pool().close().await;
        for suffix in ["", "-wal", "-shm"] {
            let file = PathBuf::from(format!("{}{suffix}", self.path.to_string_lossy()));
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(crate::plumbing(&format!("deleting {}", file.display()), error));
                }
            }
        }
        Ok(())
    }

    sql_store_operations!(
        SqliteDialect,
        sqlx::Sqlite,
        "INSERT INTO {} (id, total_cents) VALUES ($1, $2)",
        "INSERT INTO {} (event_id) VALUES ($1)"
    );
}

/// The value of `variable`, when it is set and not empty.
pub(crate) fn server_url(variable: &str) -> Option<String> {
    std::env::var(variable).ok().filter(|value| !value.is_empty())
}
