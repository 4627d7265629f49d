//! The MySQL and MariaDB dialect of oncebox, via sqlx: for services on MySQL 8.0.1+ or
//! MariaDB 10.6+, any number of instances on one table.
//!
//! [`MySqlDialect`] provides the DAOs the relay uses and a [`MySqlWriter`] that publishes into the
//! caller's own `sqlx::Transaction<'_, MySql>` (so an event commits or rolls back together with
//! the business rows). Claims use `FOR UPDATE SKIP LOCKED` on an index in claim order, every state
//! change out of a claim is fenced by its claim token, and every time that matters comes from the
//! database clock (`UTC_TIMESTAMP(6)`).
//!
//! The library's own connections run at READ COMMITTED: [`pool_options`] sets it on every
//! connection it opens. At InnoDB's default REPEATABLE READ a claim's locking read also locks the
//! gaps between index records, so a business transaction inserting an event would wait for (and
//! can deadlock with) a claim; at READ COMMITTED it never does. The caller's own transactions may
//! run at any level: the writer's insert is correct under all of them.
//!
//! ```no_run
//! use oncebox_core::{Dialect, NewOutboxEvent, OutboxDao, OutboxWriter, SchemaPlan};
//! use oncebox_mysql::MySqlDialect;
//!
//! # async fn run() -> oncebox_core::Result<()> {
//! let dialect = MySqlDialect::connect("mysql://app@localhost/orders").await?;
//! dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
//!
//! let event = NewOutboxEvent {
//!     id: uuid::Uuid::now_v7(),
//!     event_type: "order-created".into(),
//!     payload: r#"{"order":42}"#.into(),
//!     payload_type: "OrderCreated".into(),
//!     headers: Default::default(),
//!     partition_key: Some("customer-7".into()),
//! };
//! let mut tx = dialect.pool().begin().await.map_err(|e| oncebox_core::Error::database("begin", true, e))?;
//! // … the business rows are written in `tx` here …
//! dialect.writer().write(&mut tx, &[event]).await?;
//! tx.commit().await.map_err(|e| oncebox_core::Error::database("commit", true, e))?;
//!
//! let batch = dialect.outbox_dao().claim("order-created", 100).await?;
//! assert_eq!(batch.len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! With the `mysql-async` feature, [`MySqlWriter`] also publishes into and records inbox ids in a
//! `mysql_async::Transaction<'_>`, with the same SQL as the sqlx writer, so both write identical
//! rows. The relay itself always runs on the sqlx pool.
//!
//! | capability | MySQL / MariaDB |
//! |---|---|
//! | claim | one transaction: `SELECT … FORCE INDEX (claim) … FOR UPDATE SKIP LOCKED`, then `UPDATE … WHERE id IN (…)` |
//! | settle | one `UPDATE … WHERE id IN (…)` for the delivered, one joined `UPDATE` for retries and failures, fenced by the claim token |
//! | batch publish | one multi-row `INSERT` per 500 rows |
//! | caller transactions | `sqlx::Transaction<'_, MySql>`; `mysql_async::Transaction<'_>` (feature) |
//! | isolation | READ COMMITTED on every library connection |
//! | instances | any number, on one table |
//! | clock | `UTC_TIMESTAMP(6)` of the server for claims, retries, recovery, clean-up and job locks |
//! | wake-ups | none: pollers find new rows on their schedule |
//! | schema | `migrations/mysql/*.sql`, run by [`Dialect::create_schema`] under `GET_LOCK` |
//! | server | MySQL ≥ 8.0.1 or MariaDB ≥ 10.6 (SKIP LOCKED), checked at connect |
#![deny(missing_docs)]

mod config;
mod error;
mod queries;
mod row;
mod writer;

use async_trait::async_trait;
use oncebox_core::{Daos, Dialect, Error, Result, SchemaPlan, TableNames};
use sqlx::MySqlPool;

pub use config::{DEFAULT_MAX_CONNECTIONS, SESSION_SETUP, ServerVersion, connect_options, pool_options};
use oncebox_sqlx::{SqlxDlqDao, SqlxInboxDao, SqlxJobLock, SqlxOutboxDao, SqlxStore};
pub use queries::MySqlQueries;
/// The sqlx this dialect is built on (0.9), so a service names the exact version the writer
/// accepts: `oncebox::mysql::sqlx::Transaction<'_, oncebox::mysql::sqlx::MySql>`. Depending
/// on `sqlx` directly works too, as long as it resolves to the same 0.9 release.
pub use sqlx;
pub use writer::MySqlWriter;

use crate::error::SqlxResultExt;
use crate::queries::{ADD_CLAIMS, ADD_RECOVERIES};

/// [`OutboxDao`](oncebox_core::OutboxDao) for MySQL and MariaDB. There is no `UPDATE … RETURNING`
/// and no `UPDATE … WHERE id IN (SELECT … LIMIT n)`, so a claim is one short transaction of two
/// statements: `SELECT … FOR UPDATE SKIP LOCKED` on the claim index, then `UPDATE … WHERE id IN`.
/// Locks last only for that transaction, never while the broker is called. A settle is one
/// transaction too, fenced by the claim token, so a retried settle never sees half of an earlier
/// attempt.
pub type MySqlOutboxDao = SqlxOutboxDao<MySqlQueries>;

/// [`DlqDao`](oncebox_core::DlqDao) for MySQL and MariaDB. Each transfer is one transaction: the
/// source rows are locked with `FOR UPDATE SKIP LOCKED`, copied with `REPLACE INTO … SELECT` and
/// deleted, so a row is in exactly one of the two tables at every commit and concurrent transfers
/// never take the same row.
pub type MySqlDlqDao = SqlxDlqDao<MySqlQueries>;

/// [`InboxDao`](oncebox_core::InboxDao) for MySQL and MariaDB: a record is a plain `INSERT`, and
/// only the duplicate-key error on the primary key `(consumer, id)` means "already recorded", so
/// two instances racing on the same id agree on which was first and every other failure still
/// surfaces.
pub type MySqlInboxDao = SqlxInboxDao<MySqlQueries>;

/// [`JobLock`](oncebox_core::JobLock) for MySQL and MariaDB: taking a lease updates the job's row
/// only when its lease has run out on `UTC_TIMESTAMP(6)`, or inserts the row when there is none; of
/// several instances trying at once exactly one succeeds, whatever their own clocks say.
pub type MySqlJobLock = SqlxJobLock<MySqlQueries>;

/// The named lock that serializes schema creation across instances.
const SCHEMA_LOCK: &str = "oncebox_create_schema";
/// Seconds an instance waits for another one creating the schema.
const SCHEMA_LOCK_WAIT_SECONDS: i64 = 60;

/// Everything oncebox needs from a MySQL or MariaDB database: the DAOs, the writer and
/// auto-create.
#[derive(Clone, Debug)]
pub struct MySqlDialect {
    store: SqlxStore<MySqlQueries>,
}

impl MySqlDialect {
    /// A dialect over an existing pool, with the default table names. Build the pool from
    /// [`pool_options`] so its sessions run at READ COMMITTED; [`check_server`](Self::check_server)
    /// warns when they do not.
    pub fn new(pool: MySqlPool) -> Self {
        Self { store: SqlxStore::new(pool, &TableNames::default()) }
    }

    /// Connects to a `mysql://` (or `mariadb://`) URL with [`pool_options`], then checks the server
    /// (see [`check_server`](Self::check_server)).
    pub async fn connect(url: &str) -> Result<Self> {
        let options = connect_options(url)?;
        let pool = pool_options().connect_with(options).await.context("connecting to MySQL/MariaDB")?;
        let dialect = Self::new(pool);
        dialect.check_server().await?;
        Ok(dialect)
    }

    /// Reads the server's version and refuses one without `FOR UPDATE SKIP LOCKED` (MySQL before
    /// 8.0.1, MariaDB before 10.6) with a clear error, instead of claims that wait on every locked
    /// row; logs a warning when the pool's sessions do not run at READ COMMITTED.
    pub async fn check_server(&self) -> Result<ServerVersion> {
        config::check_server(self.pool()).await
    }

    /// The pool, for the caller's own transactions.
    pub fn pool(&self) -> &MySqlPool {
        self.store.pool()
    }

    /// The table names in use.
    pub fn tables(&self) -> &TableNames {
        self.store.tables()
    }

    /// The pool and the SQL for these tables, whose DAOs have their concrete types
    /// ([`MySqlOutboxDao`], …).
    pub fn store(&self) -> &SqlxStore<MySqlQueries> {
        &self.store
    }

    /// Runs the planned DDL on `connection`, which holds the schema lock.
    async fn create_tables(
        &self,
        connection: &mut sqlx::MySqlConnection,
        plan: SchemaPlan,
        context: &str,
    ) -> Result<()> {
        // The column upgrades (ADD_RECOVERIES, ADD_CLAIMS) run below, only where needed.
        let wanted = [plan.outbox, plan.dlq, plan.inbox, plan.jobs, false, false, plan.inbox];
        for (ddl, wanted) in self.store.queries().schema.iter().zip(wanted) {
            if wanted {
                sqlx::raw_sql(ddl.clone()).execute(&mut *connection).await.context(context)?;
            }
        }
        // Tables created before a column existed get it, once: MySQL 8 has no
        // ADD COLUMN IF NOT EXISTS.
        let upgrades = [
            (plan.outbox, self.tables().events(), "recoveries", ADD_RECOVERIES),
            (plan.inbox, self.tables().consumed(), "status", ADD_CLAIMS),
        ];
        for (wanted, table, column, migration) in upgrades {
            if wanted && !self.has_column(connection, table, column).await? {
                let ddl = self.store.queries().schema[migration].clone();
                sqlx::raw_sql(ddl).execute(&mut *connection).await.context(context)?;
            }
        }
        Ok(())
    }

    /// Whether `table` already has `column`.
    async fn has_column(
        &self,
        connection: &mut sqlx::MySqlConnection,
        table: &str,
        column: &str,
    ) -> Result<bool> {
        let (columns,): (i64,) = sqlx::query_as(self.store.queries().has_column.clone())
            .bind(table)
            .bind(column)
            .fetch_one(&mut *connection)
            .await
            .context("checking a table's columns")?;
        Ok(columns > 0)
    }
}

oncebox_sqlx::store_transactions!(MySqlDialect, sqlx::MySql);

#[async_trait]
impl Dialect for MySqlDialect {
    type Writer = MySqlWriter;

    fn name(&self) -> &'static str {
        "mysql"
    }

    fn with_tables(mut self, tables: &TableNames) -> Self {
        self.store = self.store.with_tables(tables);
        self
    }

    async fn create_schema(&self, plan: SchemaPlan) -> Result<()> {
        let context = "creating the oncebox tables";
        self.check_server().await?;
        // DDL commits implicitly in MySQL, so a transaction cannot serialize it; a named lock
        // held by this connection lets one instance create while the others wait.
        let mut connection = self.pool().acquire().await.context(context)?;
        let (locked,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, ?)")
            .bind(SCHEMA_LOCK)
            .bind(SCHEMA_LOCK_WAIT_SECONDS)
            .fetch_one(&mut *connection)
            .await
            .context(context)?;
        if locked != Some(1) {
            return Err(Error::database(
                context,
                true,
                std::io::Error::other(format!(
                    "another instance held the schema lock for more than {SCHEMA_LOCK_WAIT_SECONDS} s"
                )),
            ));
        }
        let created = self.create_tables(&mut connection, plan, context).await;
        let released = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *connection)
            .await
            .context(context);
        created?;
        released.map(drop)
    }

    fn daos(&self) -> Daos {
        self.store.daos()
    }

    fn writer(&self) -> MySqlWriter {
        MySqlWriter::new(self.store.queries().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<MySqlDialect>();
        assert_send_sync::<MySqlOutboxDao>();
        assert_send_sync::<MySqlDlqDao>();
        assert_send_sync::<MySqlInboxDao>();
        assert_send_sync::<MySqlJobLock>();
        assert_send_sync::<MySqlWriter>();
    }
}
