//! The SQLite dialect of oncebox, via sqlx: the embedded default, with no server to run.
//!
//! [`SqliteDialect`] provides the DAOs the relay uses and a [`SqliteWriter`] that publishes into the
//! caller's own `sqlx::Transaction<'_, Sqlite>`, so an event commits or rolls back together with the
//! business rows. Timestamps come from the database clock; ids are stored as UUID text and payloads
//! as text, so every table stays readable with the `sqlite3` shell.
//!
//! ```no_run
//! use oncebox_core::{Dialect, NewOutboxEvent, OutboxDao, OutboxWriter, SchemaPlan};
//! use oncebox_sqlite::SqliteDialect;
//!
//! # async fn run() -> oncebox_core::Result<()> {
//! let dialect = SqliteDialect::connect("app.db").await?;
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
//! | capability | SQLite |
//! |---|---|
//! | claim | `UPDATE … RETURNING` inside `BEGIN IMMEDIATE` (one writer at a time) |
//! | batch publish | one multi-row `INSERT` (split only past 32 766 bound parameters) |
//! | instances | one process (the database file is local) |
//! | wake-ups | none; pollers poll |
//! | schema | `migrations/sqlite/*.sql`, run by [`Dialect::create_schema`] |
#![deny(missing_docs)]

mod config;
mod error;
mod queries;
mod row;
mod time;
mod writer;

use async_trait::async_trait;
use oncebox_core::{Daos, Dialect, Result, SchemaPlan, TableNames};
use sqlx::SqlitePool;

pub use config::{DEFAULT_BUSY_TIMEOUT, connect_options};
use oncebox_sqlx::{SqlxDlqDao, SqlxInboxDao, SqlxJobLock, SqlxOutboxDao, SqlxResultExt, SqlxStore};
pub use queries::SqliteQueries;
/// The sqlx this dialect is built on (0.9), so a service names the exact version the writer
/// accepts: `oncebox::sqlite::sqlx::Transaction<'_, oncebox::sqlite::sqlx::Sqlite>`. Depending
/// on `sqlx` directly works too, as long as it resolves to the same 0.9 release.
pub use sqlx;
pub use writer::SqliteWriter;

/// [`OutboxDao`](oncebox_core::OutboxDao) for SQLite. Claims run in `BEGIN IMMEDIATE` transactions:
/// SQLite has one writer at a time, so a claim holds the write lock from its first read and no two
/// claimers see the same row.
pub type SqliteOutboxDao = SqlxOutboxDao<SqliteQueries>;

/// [`DlqDao`](oncebox_core::DlqDao) for SQLite. Both transfers run in one `BEGIN IMMEDIATE`
/// transaction each, so a row is in exactly one of the two tables at every commit.
pub type SqliteDlqDao = SqlxDlqDao<SqliteQueries>;

/// [`InboxDao`](oncebox_core::InboxDao) for SQLite: each call is one autocommitted statement.
pub type SqliteInboxDao = SqlxInboxDao<SqliteQueries>;

/// [`JobLock`](oncebox_core::JobLock) for SQLite: taking a lease is one upsert that only changes
/// the row when the current lease has run out, so of several instances trying at once exactly one
/// succeeds.
pub type SqliteJobLock = SqlxJobLock<SqliteQueries>;

/// Everything oncebox needs from a SQLite database: the DAOs, the writer and auto-create.
#[derive(Clone, Debug)]
pub struct SqliteDialect {
    store: SqlxStore<SqliteQueries>,
}

impl SqliteDialect {
    /// A dialect over an existing pool, with the default table names.
    ///
    /// For concurrent claims the pool's connections should have a busy timeout (SQLite's default
    /// is to fail at once when another connection writes); [`connect`](Self::connect) sets one.
    pub fn new(pool: SqlitePool) -> Self {
        Self { store: SqlxStore::new(pool, &TableNames::default()) }
    }

    /// Opens (and creates when missing) the database at a `sqlite:` URL or a file path, in WAL mode
    /// with `synchronous = NORMAL` and a [busy timeout](DEFAULT_BUSY_TIMEOUT).
    pub async fn connect(url_or_path: &str) -> Result<Self> {
        let options = connect_options(url_or_path)?;
        let pool = config::pool_options(url_or_path)
            .connect_with(options)
            .await
            .context(&format!("opening SQLite database {url_or_path}"))?;
        Ok(Self::new(pool))
    }

    /// The pool, for the caller's own transactions.
    pub fn pool(&self) -> &SqlitePool {
        self.store.pool()
    }

    /// The table names in use.
    pub fn tables(&self) -> &TableNames {
        self.store.tables()
    }

    /// The pool and the SQL for these tables, whose DAOs have their concrete types
    /// ([`SqliteOutboxDao`], …).
    pub fn store(&self) -> &SqlxStore<SqliteQueries> {
        &self.store
    }
}

oncebox_sqlx::store_transactions!(SqliteDialect, sqlx::Sqlite);

#[async_trait]
impl Dialect for SqliteDialect {
    type Writer = SqliteWriter;

    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn with_tables(mut self, tables: &TableNames) -> Self {
        self.store = self.store.with_tables(tables);
        self
    }

    async fn create_schema(&self, plan: SchemaPlan) -> Result<()> {
        let context = "creating the oncebox tables";
        let queries = self.store.queries();
        let parts = [
            (plan.outbox, &queries.schema_events),
            (plan.dlq, &queries.schema_dlq),
            (plan.inbox, &queries.schema_consumed),
            (plan.inbox, &queries.schema_inbox),
            (plan.jobs, &queries.schema_jobs),
        ];
        // SQLite DDL is transactional: either every planned table exists afterwards, or none changed.
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await.context(context)?;
        for (wanted, ddl) in parts {
            if wanted {
                sqlx::raw_sql(ddl.clone()).execute(&mut *tx).await.context(context)?;
            }
        }
        // Tables created before a column existed get it; SQLite has no ADD COLUMN IF NOT EXISTS.
        let upgrades = [
            (plan.outbox, self.tables().events(), "recoveries", &queries.schema_events_recoveries),
            (plan.inbox, self.tables().consumed(), "status", &queries.schema_consumed_claims),
        ];
        for (wanted, table, column, ddl) in upgrades {
            if !wanted {
                continue;
            }
            let (columns,): (i64,) = sqlx::query_as(queries.has_column.clone())
                .bind(table)
                .bind(column)
                .fetch_one(&mut *tx)
                .await
                .context(context)?;
            if columns == 0 {
                sqlx::raw_sql(ddl.clone()).execute(&mut *tx).await.context(context)?;
            }
        }
        tx.commit().await.context(context)
    }

    fn daos(&self) -> Daos {
        self.store.daos()
    }

    fn writer(&self) -> SqliteWriter {
        SqliteWriter::new(self.store.queries().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<SqliteDialect>();
        assert_send_sync::<SqliteOutboxDao>();
        assert_send_sync::<SqliteDlqDao>();
        assert_send_sync::<SqliteInboxDao>();
        assert_send_sync::<SqliteJobLock>();
        assert_send_sync::<SqliteWriter>();
    }
}
