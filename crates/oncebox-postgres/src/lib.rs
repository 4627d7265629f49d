//! The PostgreSQL dialect of oncebox, via sqlx: the dialect for services that run more than one
//! instance.
//!
//! [`PgDialect`] provides the DAOs the relay uses, a [`PgWriter`] that publishes into the caller's
//! own `sqlx::Transaction<'_, Postgres>` (so an event commits or rolls back together with the
//! business rows) and LISTEN/NOTIFY wake-ups. Any number of instances share one table: claims use
//! `FOR UPDATE SKIP LOCKED`, every state change out of a claim is fenced by its claim token, and
//! every time that matters comes from the database clock.
//!
//! ```no_run
//! use oncebox_core::{Dialect, NewOutboxEvent, OutboxDao, OutboxWriter, SchemaPlan};
//! use oncebox_postgres::PgDialect;
//!
//! # async fn run() -> oncebox_core::Result<()> {
//! let dialect = PgDialect::connect("postgres://app@localhost/orders").await?;
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
//! With the `tokio-postgres` feature, [`PgWriter`] also publishes into a
//! `&tokio_postgres::Transaction<'_>` (and so into deadpool-postgres transactions, which dereference
//! to one) and records inbox ids in a `tokio_postgres::Transaction<'_>`, with the same SQL as the
//! sqlx writer, so both write identical rows. The relay itself always runs on the sqlx pool.
//!
//! | capability | PostgreSQL |
//! |---|---|
//! | claim | one statement: `UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED LIMIT n) RETURNING` |
//! | settle | one statement per batch (`UPDATE … WHERE id = ANY(…)` when all were delivered, else `UPDATE … FROM UNNEST(…)`), fenced by the claim token |
//! | batch publish | one `INSERT … SELECT FROM UNNEST(…)` whatever the batch size |
//! | caller transactions | `sqlx::Transaction<'_, Postgres>`; `tokio_postgres::Transaction<'_>` (feature) |
//! | instances | any number, on one table |
//! | clock | `clock_timestamp()` of the server for claims, retries, recovery, clean-up and job locks |
//! | wake-ups | `pg_notify` from the writer (once per call and event type), one listener connection |
//! | schema | `migrations/postgres/*.sql`, run by [`Dialect::create_schema`] under an advisory lock |
#![deny(missing_docs)]

mod config;
mod error;
mod queries;
mod row;
mod wake;
mod writer;

use std::sync::Arc;

use async_trait::async_trait;
use oncebox_core::activity::PollerActivity;
use oncebox_core::{Daos, Dialect, Result, SchemaPlan, TableNames, WakeSource};
use sqlx::PgPool;

pub use config::{DEFAULT_MAX_CONNECTIONS, connect_options};
use oncebox_sqlx::{SqlxDlqDao, SqlxInboxDao, SqlxJobLock, SqlxOutboxDao, SqlxResultExt, SqlxStore};
pub use queries::PgQueries;
/// The sqlx this dialect is built on (0.9), so a service names the exact version the writer
/// accepts: `oncebox::postgres::sqlx::Transaction<'_, oncebox::postgres::sqlx::Postgres>`. Depending
/// on `sqlx` directly works too, as long as it resolves to the same 0.9 release.
pub use sqlx;
pub use wake::PgWakeSource;
pub use writer::PgWriter;

/// [`OutboxDao`](oncebox_core::OutboxDao) for PostgreSQL. A claim is one `UPDATE … FROM (SELECT …
/// FOR UPDATE SKIP LOCKED)` statement, so any number of instances claim from one table without ever
/// sharing a row and without holding locks while the broker is called; a settle is one `UPDATE …
/// WHERE id = ANY(…)` when every event was delivered and one `UPDATE … FROM UNNEST(…)` otherwise,
/// guarded by the claim token.
pub type PgOutboxDao = SqlxOutboxDao<PgQueries>;

/// [`DlqDao`](oncebox_core::DlqDao) for PostgreSQL. Each transfer is one statement whose CTEs lock
/// the rows (`FOR UPDATE SKIP LOCKED`), delete them from one table and insert them into the other,
/// so a row is in exactly one of the two tables at every commit and concurrent transfers never
/// collide.
pub type PgDlqDao = SqlxDlqDao<PgQueries>;

/// [`InboxDao`](oncebox_core::InboxDao) for PostgreSQL: records are `INSERT … ON CONFLICT DO
/// NOTHING`, so a duplicate is detected by the primary key, also between instances racing on the
/// same id.
pub type PgInboxDao = SqlxInboxDao<PgQueries>;

/// [`JobLock`](oncebox_core::JobLock) for PostgreSQL: taking a lease is one upsert that only
/// changes the row when the current lease has run out on `clock_timestamp()`, so of several
/// instances trying at once exactly one succeeds, whatever their own clocks say.
pub type PgJobLock = SqlxJobLock<PgQueries>;

/// The advisory lock key that serializes schema creation across instances (any value works as
/// long as every oncebox instance uses the same one; this is "oncebox" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x006f_6e63_6562_6f78;

/// Everything oncebox needs from a PostgreSQL database: the DAOs, the writer, auto-create and
/// wake-ups.
#[derive(Clone, Debug)]
pub struct PgDialect {
    store: SqlxStore<PgQueries>,
    wake_ups: bool,
    activity: Arc<PollerActivity>,
}

impl PgDialect {
    /// A dialect over an existing pool, with the default table names and wake-ups on.
    pub fn new(pool: PgPool) -> Self {
        Self {
            store: SqlxStore::new(pool, &TableNames::default()),
            wake_ups: true,
            activity: Arc::new(PollerActivity::new()),
        }
    }

    /// Connects to a `postgres://` URL with a pool of at most [`DEFAULT_MAX_CONNECTIONS`].
    pub async fn connect(url: &str) -> Result<Self> {
        let options = connect_options(url)?;
        let pool = config::pool_options().connect_with(options).await.context("connecting to PostgreSQL")?;
        Ok(Self::new(pool))
    }

    /// The same dialect with LISTEN/NOTIFY wake-ups on (the default) or off. Off, the writer sends
    /// no NOTIFY and [`Dialect::wake_source`] gives none: pollers find new rows on their schedule.
    pub fn with_wake_ups(mut self, enabled: bool) -> Self {
        self.wake_ups = enabled;
        self
    }

    /// The pool, for the caller's own transactions.
    pub fn pool(&self) -> &PgPool {
        self.store.pool()
    }

    /// The table names in use.
    pub fn tables(&self) -> &TableNames {
        self.store.tables()
    }

    /// The NOTIFY channel of these tables (`<prefix>oncebox_wake_ups`).
    pub fn channel(&self) -> &str {
        &self.store.queries().channel
    }

    /// The pool and the SQL for these tables, whose DAOs have their concrete types
    /// ([`PgOutboxDao`], …).
    pub fn store(&self) -> &SqlxStore<PgQueries> {
        &self.store
    }

    /// The wake-up source as its concrete type, whether or not wake-ups are on.
    pub async fn pg_wake_source(&self) -> Result<PgWakeSource> {
        PgWakeSource::connect(self.pool(), self.channel()).await
    }
}

oncebox_sqlx::store_transactions!(PgDialect, sqlx::Postgres);

#[async_trait]
impl Dialect for PgDialect {
    type Writer = PgWriter;

    fn name(&self) -> &'static str {
        "postgres"
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
            // Idempotent (adds the column only when the catalog lacks it): also upgrades tables
            // made before it existed, without locking the table when there is nothing to do.
            (plan.outbox, &queries.schema_events_recoveries),
            (plan.dlq, &queries.schema_dlq),
            (plan.inbox, &queries.schema_consumed),
            // Idempotent the same way: upgrades inbox tables made before claims existed.
            (plan.inbox, &queries.schema_consumed_claims),
            (plan.inbox, &queries.schema_inbox),
            (plan.jobs, &queries.schema_jobs),
        ];
        // PostgreSQL DDL is transactional, but two sessions running `CREATE … IF NOT EXISTS` for
        // the same name at once can still collide on the catalog's unique indexes. The advisory
        // lock lets one instance create while the others wait, then find everything there.
        let mut tx = self.pool().begin().await.context(context)?;
        // Every start re-runs the DDL; its "already exists, skipping" notices are noise.
        sqlx::query("SET LOCAL client_min_messages = warning").execute(&mut *tx).await.context(context)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK_KEY)
            .execute(&mut *tx)
            .await
            .context(context)?;
        for (wanted, ddl) in parts {
            if wanted {
                sqlx::raw_sql(ddl.clone()).execute(&mut *tx).await.context(context)?;
            }
        }
        tx.commit().await.context(context)
    }

    fn daos(&self) -> Daos {
        self.store.daos()
    }

    fn without_wake_ups(self) -> Self {
        self.with_wake_ups(false)
    }

    fn writer(&self) -> PgWriter {
        PgWriter::new(self.store.queries().clone(), self.wake_ups, self.activity.clone())
    }

    async fn wake_source(&self) -> Result<Option<Box<dyn WakeSource>>> {
        if !self.wake_ups {
            return Ok(None);
        }
        Ok(Some(Box::new(self.pg_wake_source().await?)))
    }

    /// Shared by every clone of this dialect and every writer it made: a writer leaves out the
    /// NOTIFY of a type whose poller in this process is awake.
    fn poller_activity(&self) -> Option<Arc<PollerActivity>> {
        self.wake_ups.then(|| self.activity.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<PgDialect>();
        assert_send_sync::<PgOutboxDao>();
        assert_send_sync::<PgDlqDao>();
        assert_send_sync::<PgInboxDao>();
        assert_send_sync::<PgJobLock>();
        assert_send_sync::<PgWriter>();
        fn assert_send<T: Send + 'static>() {}
        assert_send::<PgWakeSource>();
    }
}
