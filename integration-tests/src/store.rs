//! The SQL side of a suite, one [`Store`] per dialect: instances over one run's tables, the business
//! writes that publish in the caller's transaction, the effect applied through the inbox (or in a
//! durable inbox handler's transaction), and the counts the accounting reads.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use oncebox::mysql::MySqlDialect;
use oncebox::postgres::PgDialect;
use oncebox::sqlite::SqliteDialect;
use oncebox::{
    Consumed, Dialect, Error, ErrorKind, Inbox, Publisher, Result, StoredInboxTransactions, Transactions,
};
use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::{EVENT_TYPE, fresh_name};

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
    /// Where the listener dead-letters an event whose handler keeps failing (a Kafka topic; a
    /// RabbitMQ dead-letter exchange and its queue, both of this name), or `None`: then such an
    /// event is retried for as long as it fails.
    pub dead_letter: Option<String>,
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
            dead_letter: None,
            prefix,
        }
    }

    /// The oncebox configuration of a run: its tables, the one event type relayed to its
    /// destination with `settings` added (YAML `key: value` lines of the event), and the inbox.
    pub fn config(&self, emergency_timeout: &str, settings: &[&str]) -> Result<oncebox::Config> {
        let settings: String = settings.iter().map(|line| format!("        {line}\n")).collect();
        oncebox::Config::from_yaml_str(&format!(
            "oncebox:
  tables:
    prefix: {prefix}
  outbox:
    sender: {{ emergency-timeout: {emergency_timeout} }}
    events:
      {EVENT_TYPE}:
        topic: {destination}
{settings}        polling: {{ min-fixed-delay: 10ms, max-fixed-delay: 100ms }}
  inbox: {{}}
",
            prefix = self.prefix,
            destination = self.destination,
        ))
    }

    /// The oncebox tables of the run, as the facade names them from the prefix.
    pub fn outbox_tables(&self) -> Result<oncebox_core::TableNames> {
        oncebox_core::TableNames::with_prefix(&self.prefix)
    }
}

/// The inbox type the facade hands out for a store's dialect.
pub type StoreInbox<S> = Inbox<Arc<<<S as Store>::Dialect as Dialect>::Writer>>;

/// The transaction a durable inbox handler of a store's dialect runs in.
pub type StoreTx<S> = <<S as Store>::Dialect as Transactions>::Tx;

/// One SQL database under test, named by an environment variable (SQLite needs none: a temp file).
pub trait Store: Sized + Send + Sync + 'static {
    /// The dialect the facade is built with; its transactions also run durable inbox handlers.
    type Dialect: Dialect + StoredInboxTransactions + Clone + Send + Sync + 'static;

    /// Short name used in test names (`postgres`, `mysql`, `sqlite`).
    const NAME: &'static str;
    /// The variable naming the server, or `None` when the store needs no server.
    const VARIABLE: Option<&'static str>;
    /// How many relay processes the chaos ledger runs on one run's tables: two, each with its own
    /// pool (on SQLite, two processes on one file, whose claims take turns at its write lock).
    const RELAYS: usize;

    /// The store its server variable names, read through `variable` (the environment, or the
    /// environment with a private server's address in place of the shared one); `None` when the
    /// variable is not set.
    fn from_variables(variable: &dyn Fn(&str) -> Option<String>, names: &Names) -> Option<Self>;

    /// The store configured by the environment, `None` when its variable is not set.
    fn from_env(names: &Names) -> Option<Self> {
        Self::from_variables(&server_url, names)
    }

    /// A new dialect over the store's database, on a pool of its own.
    fn open(&self) -> impl Future<Output = Result<Self::Dialect>> + Send;

    /// Creates the business tables `names.orders` and `names.effects`.
    fn create_business_tables(
        &self,
        dialect: &Self::Dialect,
        names: &Names,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Inserts `orders` into the business table and publishes their events through `publisher`
    /// (`publish` for one, `publish_all` for several) in one transaction, then commits it or rolls
    /// it back; what became of the transaction, with the event ids when they were handed out.
    fn place(
        dialect: &Self::Dialect,
        publisher: &StorePublisher<Self>,
        names: &Names,
        event_type: &str,
        orders: &[Order],
        commit: bool,
    ) -> impl Future<Output = Placed> + Send;

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

    /// Creates the deliveries table: one row per delivery a consumer saw, written before the
    /// effect, with the outcome once known.
    fn create_deliveries_table(
        dialect: &Self::Dialect,
        table: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Records a delivery of event `id` to the process `pid` (committed on its own, so a kill right
    /// after loses nothing); returns the delivery's key for [`Store::note_delivery`].
    fn record_delivery(
        dialect: &Self::Dialect,
        table: &str,
        id: Uuid,
        pid: u32,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Notes the outcome (`applied`, `duplicate`) of the delivery `delivery`.
    fn note_delivery(
        dialect: &Self::Dialect,
        table: &str,
        delivery: &str,
        outcome: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Creates an effects table (no key, so an effect applied twice shows in the count): the
    /// run's own, and one for each further consumer.
    fn create_effects_table(dialect: &Self::Dialect, table: &str) -> impl Future<Output = Result<()>> + Send;

    /// Deliveries that ran or may have run the effect (noted `applied`, or never noted: the
    /// handler did not finish), by event id and process: `(event id, pid, deliveries)`.
    fn effect_deliveries_by_process(
        dialect: &Self::Dialect,
        table: &str,
    ) -> impl Future<Output = Result<Vec<(String, i64, i64)>>> + Send;

    /// The deliveries of event `id` whose handler noted the outcome `failed`.
    fn failed_deliveries(
        dialect: &Self::Dialect,
        table: &str,
        id: Uuid,
    ) -> impl Future<Output = Result<i64>> + Send;

    /// Deliveries by event id and outcome: `(event id, outcome or "" when none was noted,
    /// deliveries)`.
    fn deliveries_by_outcome(
        dialect: &Self::Dialect,
        table: &str,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>>> + Send;

    /// Deliveries whose handler noted an outcome, by event id: `(event id, deliveries)`.
    fn finished_deliveries(
        dialect: &Self::Dialect,
        table: &str,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// Writes the effect row of event `id` in `tx`, a durable inbox handler's transaction: the
    /// processor settles the message PROCESSED in the same transaction, so the row commits with
    /// the settle or not at all (and without any inbox check here: the claim is the check).
    fn apply_in(tx: &mut StoreTx<Self>, names: &Names, id: Uuid) -> impl Future<Output = Result<()>> + Send;

    /// Notes the outcome of the delivery `delivery` in `tx`, so that the note commits with the
    /// effect: a run whose transaction rolls back leaves its delivery without an outcome.
    fn note_delivery_in(
        tx: &mut StoreTx<Self>,
        table: &str,
        delivery: &str,
        outcome: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The durable inbox messages `consumer` stored in the run's `outbox_inbox_messages`, as
    /// `(event id, status)`.
    fn stored_messages(
        dialect: &Self::Dialect,
        names: &Names,
        consumer: &str,
    ) -> impl Future<Output = Result<Vec<(Uuid, String)>>> + Send;

    /// Writes the effect row of event `id` with no inbox check at all: the deliberately broken
    /// consumer, which applies every redelivery again.
    fn apply_without_inbox(
        dialect: &Self::Dialect,
        names: &Names,
        id: Uuid,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The order numbers in the business table: which transactions committed, when a commit's
    /// reply was lost.
    fn orders(dialect: &Self::Dialect, names: &Names) -> impl Future<Output = Result<Vec<i64>>> + Send;

    /// Drops `table` when it exists.
    fn drop_table(dialect: &Self::Dialect, table: &str) -> impl Future<Output = Result<()>> + Send;

    /// Removes what the run created: its tables, or the database file.
    fn dispose(&self, dialect: &Self::Dialect, names: &Names) -> impl Future<Output = Result<()>> + Send;
}

fn database_error(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |error| Error::database(context, false, error)
}

/// What became of one business transaction of [`Store::place`].
#[derive(Debug)]
pub enum Placed {
    /// Committed: these events exist.
    Committed(Vec<Uuid>),
    /// Rolled back on purpose: these events never existed.
    RolledBack(Vec<Uuid>),
    /// The transaction failed before its commit was sent, so nothing of it was committed; the
    /// ids are those handed out before the failure (none when the publish itself failed).
    Failed(Vec<Uuid>, Error),
    /// The commit was sent but its answer never came (the server restarted, the connection
    /// broke): the transaction may or may not have committed, and only the database can tell.
    InDoubt(Vec<Uuid>, Error),
}

/// The publisher type the facade hands out for a store's dialect.
pub type StorePublisher<S> = Publisher<Arc<<<S as Store>::Dialect as Dialect>::Writer>>;

/// The `n`th bind marker: `$n` for PostgreSQL and SQLite, `?` for MySQL.
fn mark(numbered: bool, n: usize) -> String {
    if numbered { format!("${n}") } else { "?".to_owned() }
}

/// The statement that writes one effect row (value 1 the event id), whichever way it is applied.
fn effect_insert(names: &Names, numbered: bool) -> String {
    format!("INSERT INTO {} (event_id) VALUES ({})", names.effects, mark(numbered, 1))
}

/// The statement that notes a delivery's outcome (value 1 the outcome, value 2 the delivery).
fn outcome_update(table: &str, numbered: bool) -> String {
    format!("UPDATE {table} SET outcome = {} WHERE delivery_id = {}", mark(numbered, 1), mark(numbered, 2))
}

/// A durable inbox id as a dialect's `outbox_inbox_messages.id` column reads: a native UUID
/// (PostgreSQL's `UUID`, MySQL's `BINARY(16)` as sqlx encodes a `Uuid`), or hyphenated text
/// (SQLite).
trait StoredId {
    fn into_uuid(self) -> Result<Uuid>;
}

impl StoredId for Uuid {
    fn into_uuid(self) -> Result<Uuid> {
        Ok(self)
    }
}

impl StoredId for String {
    fn into_uuid(self) -> Result<Uuid> {
        Uuid::parse_str(&self).map_err(|error| crate::plumbing(&format!("stored message id {self:?}"), error))
    }
}

/// The three stores take the same SQL but for their bind markers (and how the durable inbox's id
/// column reads), so one body serves them all.
macro_rules! sql_store_operations {
    ($dialect:ty, numbered: $numbered:literal, stored_id: $stored_id:ty) => {
        type Dialect = $dialect;

        async fn create_business_tables(&self, dialect: &$dialect, names: &Names) -> Result<()> {
            let orders =
                format!("CREATE TABLE {} (id BIGINT PRIMARY KEY, total_cents BIGINT NOT NULL)", names.orders);
            sqlx::raw_sql(AssertSqlSafe(orders))
                .execute(dialect.pool())
                .await
                .map_err(database_error("creating the business tables"))?;
            Self::create_effects_table(dialect, &names.effects).await
        }

        async fn place(
            dialect: &$dialect,
            publisher: &StorePublisher<Self>,
            names: &Names,
            event_type: &str,
            orders: &[Order],
            commit: bool,
        ) -> Placed {
            let insert = format!(
                "INSERT INTO {} (id, total_cents) VALUES ({}, {})",
                names.orders,
                mark($numbered, 1),
                mark($numbered, 2)
            );
            let mut tx = match dialect.pool().begin().await {
                Ok(tx) => tx,
                Err(error) => return Placed::Failed(Vec::new(), database_error("begin")(error)),
            };
            for order in orders {
                let inserted = sqlx::query(AssertSqlSafe(insert.clone()))
                    .bind(order.order)
                    .bind(order.total_cents)
                    .execute(&mut *tx)
                    .await;
                if let Err(error) = inserted {
                    return Placed::Failed(Vec::new(), database_error("inserting an order")(error));
                }
            }
            let published = match orders {
                [order] => publisher.publish(&mut tx, event_type, order).await.map(|id| vec![id]),
                _ => publisher.publish_all(&mut tx, event_type, orders).await,
            };
            let ids = match published {
                Ok(ids) => ids,
                Err(error) => return Placed::Failed(Vec::new(), error),
            };
            if !commit {
                return match tx.rollback().await {
                    Ok(()) => Placed::RolledBack(ids),
                    // A failed rollback still commits nothing.
                    Err(error) => Placed::Failed(ids, database_error("rollback")(error)),
                };
            }
            match tx.commit().await {
                Ok(()) => Placed::Committed(ids),
                Err(error) => Placed::InDoubt(ids, database_error("commit")(error)),
            }
        }

        async fn apply(
            dialect: &$dialect,
            inbox: &StoreInbox<Self>,
            names: &Names,
            id: Uuid,
            fail: bool,
        ) -> Result<Consumed<()>> {
            let insert = effect_insert(names, $numbered);
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

        async fn create_deliveries_table(dialect: &$dialect, table: &str) -> Result<()> {
            let statement = format!(
                "CREATE TABLE {table} (delivery_id VARCHAR(36) PRIMARY KEY, event_id VARCHAR(36) NOT NULL, \
                 pid BIGINT NOT NULL, outcome VARCHAR(16))"
            );
            sqlx::raw_sql(AssertSqlSafe(statement))
                .execute(dialect.pool())
                .await
                .map_err(database_error("creating the deliveries table"))?;
            Ok(())
        }

        async fn record_delivery(dialect: &$dialect, table: &str, id: Uuid, pid: u32) -> Result<String> {
            // A key made here rather than by the database, so that no dialect needs RETURNING.
            let delivery = Uuid::new_v4().to_string();
            let sql = format!(
                "INSERT INTO {table} (delivery_id, event_id, pid) VALUES ({}, {}, {})",
                mark($numbered, 1),
                mark($numbered, 2),
                mark($numbered, 3)
            );
            sqlx::query(AssertSqlSafe(sql))
                .bind(&delivery)
                .bind(id.to_string())
                .bind(i64::from(pid))
                .execute(dialect.pool())
                .await
                .map_err(database_error("recording a delivery"))?;
            Ok(delivery)
        }

        async fn note_delivery(dialect: &$dialect, table: &str, delivery: &str, outcome: &str) -> Result<()> {
            let sql = outcome_update(table, $numbered);
            sqlx::query(AssertSqlSafe(sql))
                .bind(outcome)
                .bind(delivery)
                .execute(dialect.pool())
                .await
                .map_err(database_error("noting a delivery's outcome"))?;
            Ok(())
        }

        async fn create_effects_table(dialect: &$dialect, table: &str) -> Result<()> {
            // No key on purpose: an effect applied twice must show up in the count.
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE TABLE {table} (event_id VARCHAR(36) NOT NULL)")))
                .execute(dialect.pool())
                .await
                .map_err(database_error("creating an effects table"))?;
            Ok(())
        }

        async fn effect_deliveries_by_process(dialect: &$dialect, table: &str) -> Result<Vec<(String, i64, i64)>> {
            let sql = format!(
                "SELECT event_id, pid, COUNT(*) FROM {table} WHERE outcome IS NULL OR outcome = 'applied' \
                 GROUP BY event_id, pid"
            );
            sqlx::query_as(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("reading the deliveries by process"))
        }

        async fn failed_deliveries(dialect: &$dialect, table: &str, id: Uuid) -> Result<i64> {
            let sql = format!(
                "SELECT COUNT(*) FROM {table} WHERE event_id = {} AND outcome = 'failed'",
                mark($numbered, 1)
            );
            sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(id.to_string())
                .fetch_one(dialect.pool())
                .await
                .map_err(database_error("counting failed deliveries"))
        }

        async fn deliveries_by_outcome(dialect: &$dialect, table: &str) -> Result<Vec<(String, String, i64)>> {
            let sql = format!(
                "SELECT event_id, COALESCE(outcome, ''), COUNT(*) FROM {table} GROUP BY event_id, COALESCE(outcome, '')"
            );
            sqlx::query_as(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("counting deliveries by outcome"))
        }

        async fn finished_deliveries(dialect: &$dialect, table: &str) -> Result<Vec<(String, i64)>> {
            let sql = format!("SELECT event_id, COUNT(*) FROM {table} WHERE outcome IS NOT NULL GROUP BY event_id");
            sqlx::query_as(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("counting deliveries"))
        }

        async fn apply_without_inbox(dialect: &$dialect, names: &Names, id: Uuid) -> Result<()> {
            let insert = effect_insert(names, $numbered);
            sqlx::query(AssertSqlSafe(insert))
                .bind(id.to_string())
                .execute(dialect.pool())
                .await
                .map_err(database_error("inserting the effect"))?;
            Ok(())
        }

        async fn apply_in(tx: &mut StoreTx<Self>, names: &Names, id: Uuid) -> Result<()> {
            let insert = effect_insert(names, $numbered);
            sqlx::query(AssertSqlSafe(insert))
                .bind(id.to_string())
                .execute(&mut **tx)
                .await
                .map_err(database_error("inserting the effect in the handler's transaction"))?;
            Ok(())
        }

        async fn note_delivery_in(tx: &mut StoreTx<Self>, table: &str, delivery: &str, outcome: &str) -> Result<()> {
            let sql = outcome_update(table, $numbered);
            sqlx::query(AssertSqlSafe(sql))
                .bind(outcome)
                .bind(delivery)
                .execute(&mut **tx)
                .await
                .map_err(database_error("noting a delivery's outcome in the handler's transaction"))?;
            Ok(())
        }

        async fn stored_messages(dialect: &$dialect, names: &Names, consumer: &str) -> Result<Vec<(Uuid, String)>> {
            let sql = format!(
                "SELECT id, status FROM {} WHERE consumer = {}",
                names.outbox_tables()?.inbox(),
                mark($numbered, 1)
            );
            let rows: Vec<($stored_id, String)> = sqlx::query_as(AssertSqlSafe(sql))
                .bind(consumer)
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("reading the stored inbox messages"))?;
            rows.into_iter().map(|(id, status)| Ok((id.into_uuid()?, status))).collect()
        }

        async fn orders(dialect: &$dialect, names: &Names) -> Result<Vec<i64>> {
            let sql = format!("SELECT id FROM {}", names.orders);
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_all(dialect.pool())
                .await
                .map_err(database_error("reading the orders"))
        }

        async fn drop_table(dialect: &$dialect, table: &str) -> Result<()> {
            sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(dialect.pool())
                .await
                .map_err(database_error("dropping a table"))?;
            Ok(())
        }
    };
}

/// Drops the run's oncebox and business tables, one statement each (SQLite drops one per statement).
async fn drop_tables<'c, E>(executor: E, names: &Names) -> Result<()>
where
    E: sqlx::Executor<'c> + Copy,
{
    let tables = names.outbox_tables()?;
    for table in [
        tables.events(),
        tables.dlq(),
        tables.consumed(),
        tables.inbox(),
        tables.jobs(),
        &names.orders,
        &names.effects,
    ] {
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

    fn from_variables(variable: &dyn Fn(&str) -> Option<String>, _names: &Names) -> Option<Self> {
        variable("ONCEBOX_PG_URL").map(|url| Self { url })
    }

    async fn open(&self) -> Result<PgDialect> {
        PgDialect::connect(&self.url).await
    }

    async fn dispose(&self, dialect: &PgDialect, names: &Names) -> Result<()> {
        drop_tables(dialect.pool(), names).await
    }

    sql_store_operations!(PgDialect, numbered: true, stored_id: Uuid);
}

/// MySQL 8 or MariaDB 10.6+ at `ONCEBOX_MYSQL_URL`, tables under a fresh prefix in that database.
pub struct MySqlStore {
    url: String,
}

impl Store for MySqlStore {
    const NAME: &'static str = "mysql";
    const VARIABLE: Option<&'static str> = Some("ONCEBOX_MYSQL_URL");
    const RELAYS: usize = 2;

    fn from_variables(variable: &dyn Fn(&str) -> Option<String>, _names: &Names) -> Option<Self> {
        variable("ONCEBOX_MYSQL_URL").map(|url| Self { url })
    }

    async fn open(&self) -> Result<MySqlDialect> {
        MySqlDialect::connect(&self.url).await
    }

    async fn dispose(&self, dialect: &MySqlDialect, names: &Names) -> Result<()> {
        drop_tables(dialect.pool(), names).await
    }

    sql_store_operations!(MySqlDialect, numbered: false, stored_id: Uuid);
}

/// SQLite in a fresh file of the temp directory, deleted at the end.
pub struct SqliteStore {
    path: PathBuf,
}

impl Store for SqliteStore {
    const NAME: &'static str = "sqlite";
    const VARIABLE: Option<&'static str> = None;
    const RELAYS: usize = 2;

    fn from_variables(_variable: &dyn Fn(&str) -> Option<String>, names: &Names) -> Option<Self> {
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

    sql_store_operations!(SqliteDialect, numbered: true, stored_id: String);
}

/// The value of `variable`, when it is set and not empty.
pub(crate) fn server_url(variable: &str) -> Option<String> {
    std::env::var(variable).ok().filter(|value| !value.is_empty())
}
