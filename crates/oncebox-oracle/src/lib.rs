//! The Oracle dialect of oncebox, via the [`oracle`] crate: for services on Oracle Database 19c or
//! later (written for 23ai), any number of instances on one table.
//!
//! [`OraDialect`] provides the DAOs the relay uses and an [`OraWriter`] that publishes into the
//! caller's [`OraTransaction`] (so an event commits or rolls back together with the business
//! rows). The `oracle` crate blocks its thread, so every call runs on tokio's blocking threads,
//! at most as many at once as the pool has connections ([`OraConnectOptions::max_connections`]),
//! each under a call timeout; an async worker never waits on the database.
//!
//! Oracle refuses `FETCH FIRST … FOR UPDATE` (ORA-02014), and the usual workaround, a top-N
//! subquery under an outer `FOR UPDATE SKIP LOCKED`, makes every poller compute the same N rows:
//! instances queue behind each other's locks and come back with empty batches. Here a claim opens
//! an unlimited `SELECT … ORDER BY next_retry_at FOR UPDATE SKIP LOCKED` cursor and fetches only
//! the batch (Oracle locks a row of such a cursor when it fetches it), then marks those rows by
//! id, in one short transaction. Stuck recovery and both DLQ transfers lock their rows the same
//! way.
//!
//! ```no_run
//! use oncebox_core::{Dialect, NewOutboxEvent, OutboxDao, OutboxWriter, SchemaPlan};
//! use oncebox_oracle::OraDialect;
//!
//! # async fn run() -> oncebox_core::Result<()> {
//! let dialect = OraDialect::connect("oracle://shop:secret@localhost:1521/FREEPDB1").await?;
//! dialect.create_schema(SchemaPlan::ALL).await?;
//!
//! let event = NewOutboxEvent {
//!     id: uuid::Uuid::now_v7(),
//!     event_type: "order-created".into(),
//!     payload: r#"{"order":42}"#.into(),
//!     payload_type: "OrderCreated".into(),
//!     headers: Default::default(),
//!     partition_key: Some("customer-7".into()),
//! };
//! let mut tx = dialect.begin().await?;
//! tx.run(|connection| {
//!     connection.execute("INSERT INTO orders (id) VALUES (:1)", &[&42])?;
//!     Ok(())
//! })
//! .await?;
//! dialect.writer().write(&mut tx, &[event]).await?;
//! tx.commit().await?;
//!
//! let batch = dialect.outbox_dao().claim("order-created", 100).await?;
//! assert_eq!(batch.len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! | capability | Oracle |
//! |---|---|
//! | claim | one transaction: a `FOR UPDATE SKIP LOCKED` cursor fetching the batch, then `UPDATE … WHERE id IN (…)` |
//! | settle | one array-bound `UPDATE` per batch, fenced by the claim token |
//! | durable inbox | [`OraStoredInboxDao`]: payloads as BLOBs; claims as the outbox's (`FOR UPDATE SKIP LOCKED` cursor, then `UPDATE … WHERE id IN (…)`), settles fenced by the claim token, PROCESSED also in a handler's [`OraTransaction`] |
//! | batch publish | one array-bound `INSERT` (payloads and headers as temporary LOBs) |
//! | caller transactions | [`OraTransaction`], from [`OraDialect::begin`] |
//! | blocking calls | on tokio's blocking threads, bounded by the pool size, with a call timeout |
//! | instances | any number, on one table |
//! | clock | `SYS_EXTRACT_UTC(SYSTIMESTAMP)` of the server for claims, retries, recovery, clean-up and job locks |
//! | wake-ups | none: pollers find new rows on their schedule |
//! | schema | `migrations/oracle/*.sql`, PL/SQL blocks that ignore "already exists", run by [`Dialect::create_schema`] |
//! | client | ODPI-C is built in; the Oracle Client library (Instant Client 19+) is loaded at the first connection |
#![deny(missing_docs)]

mod blocking;
mod config;
mod dlq;
mod error;
mod inbox;
mod lock;
mod outbox;
mod row;
mod session;
mod statements;
mod stored;
mod writer;

use std::sync::Arc;

use async_trait::async_trait;
use oncebox_core::{Daos, Dialect, Result, SchemaPlan, TableNames};
use uuid::Uuid;

pub use crate::config::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_CONNECTIONS, OraConnectOptions};
pub use crate::dlq::OraDlqDao;
pub use crate::inbox::OraInboxDao;
pub use crate::lock::OraJobLock;
pub use crate::outbox::OraOutboxDao;
pub use crate::stored::OraStoredInboxDao;
pub use crate::writer::{OraTransaction, OraWriter};
/// The `oracle` crate this dialect is built on, for the caller's own statements.
pub use oracle;

use crate::blocking::Bounded;
use crate::error::OraResultExt;
use crate::session::{Db, OraSource, Store};
use crate::statements::Statements;

/// Everything the engine needs from Oracle: the DAOs, the writer and the schema.
#[derive(Clone)]
pub struct OraDialect {
    db: Db,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for OraDialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OraDialect").field("tables", &self.statements.tables).finish()
    }
}

impl OraDialect {
    /// Connects with the settings of an `oracle://user:password@host:port/service` URL (see
    /// [`OraConnectOptions::from_url`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(OraConnectOptions::from_url(url)?).await
    }

    /// Creates a session pool with `options` and checks one connection.
    pub async fn connect_with(options: OraConnectOptions) -> Result<Self> {
        let context = "connecting to Oracle";
        let pool = tokio::task::spawn_blocking(move || -> Result<_> {
            let pool = oracle::pool::PoolBuilder::new(
                options.username.as_str(),
                options.password.as_str(),
                options.connect_string.as_str(),
            )
            .max_connections(options.max_connections)
            // The bound keeps the library's own calls within the pool; a caller's work on
            // `pool()` beside it waits for a connection (up to the call timeout) instead of
            // failing at once with ORA-24418.
            .get_mode(oracle::pool::GetMode::TimedWait(options.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT)))
            .build()
            .context(context)?;
            pool.get().context(context)?.ping().context(context)?;
            Ok((pool, options))
        })
        .await
        .map_err(|error| {
            oncebox_core::Error::database(format!("{context}: the blocking call failed"), false, error)
        })?;
        let (pool, options) = pool?;
        Ok(Self::new(pool, options.max_connections, options.call_timeout))
    }

    /// A dialect on a pool of the caller's, running at most `max_calls` calls at once (the
    /// pool's size is the right number), each limited to `call_timeout`.
    pub fn new(pool: oracle::pool::Pool, max_calls: u32, call_timeout: Option<std::time::Duration>) -> Self {
        Self {
            db: Bounded::new(OraSource { pool, call_timeout }, max_calls),
            statements: Arc::new(Statements::new(&TableNames::default())),
        }
    }

    /// The table names in use.
    pub fn tables(&self) -> &TableNames {
        &self.statements.tables
    }

    /// The session pool, for the caller's own work outside a transaction of [`begin`](Self::begin).
    pub fn pool(&self) -> &oracle::pool::Pool {
        &self.db.source().pool
    }

    /// Begins a transaction on a pooled connection, for business statements and
    /// [`OraWriter`] together. It holds one of the bounded calls until it ends.
    pub async fn begin(&self) -> Result<OraTransaction> {
        Ok(OraTransaction::new(self.db.hold("beginning a transaction").await?))
    }

    fn store(&self) -> Store {
        Store { db: self.db.clone(), statements: Arc::clone(&self.statements) }
    }

    /// The outbox DAO as its concrete type.
    pub fn ora_outbox_dao(&self) -> OraOutboxDao {
        OraOutboxDao(self.store())
    }

    /// The DLQ DAO as its concrete type.
    pub fn ora_dlq_dao(&self) -> OraDlqDao {
        OraDlqDao(self.store())
    }

    /// The inbox DAO as its concrete type.
    pub fn ora_inbox_dao(&self) -> OraInboxDao {
        OraInboxDao(self.store())
    }

    /// The durable inbox DAO as its concrete type.
    pub fn ora_stored_inbox_dao(&self) -> OraStoredInboxDao {
        OraStoredInboxDao(self.store())
    }

    /// The job lock as its concrete type.
    pub fn ora_job_lock(&self) -> OraJobLock {
        OraJobLock(self.store())
    }
}

/// Transactions on pooled connections, for a listener's transactional handlers
/// ([`Handlers::on_in`](oncebox_core::consume::Handlers::on_in)).
impl oncebox_core::Transactions for OraDialect {
    type Tx = OraTransaction;

    async fn begin(&self) -> Result<OraTransaction> {
        OraDialect::begin(self).await
    }

    async fn commit(&self, tx: OraTransaction) -> Result<()> {
        tx.commit().await
    }

    async fn rollback(&self, tx: OraTransaction) -> Result<()> {
        tx.rollback().await
    }
}

/// Settles durable inbox messages in a transactional handler's [`OraTransaction`], so the new
/// status commits or rolls back with the handler's effect.
impl oncebox_core::StoredInboxTransactions for OraDialect {
    async fn finish_in(
        &self,
        tx: &mut OraTransaction,
        consumer: &str,
        id: Uuid,
        token: Uuid,
    ) -> Result<bool> {
        let context = "settling an inbox message";
        let statements = Arc::clone(&self.statements);
        let consumer = consumer.to_owned();
        tx.held()?
            .run(context, move |connection| {
                crate::stored::finish_on(&statements, connection, &consumer, id, token, context)
            })
            .await
    }
}

#[async_trait]
impl Dialect for OraDialect {
    type Writer = OraWriter;

    fn name(&self) -> &'static str {
        "oracle"
    }

    fn with_tables(mut self, tables: &TableNames) -> Self {
        self.statements = Arc::new(Statements::new(tables));
        self
    }

    async fn create_schema(&self, plan: SchemaPlan) -> Result<()> {
        let context = "creating the oncebox tables";
        let statements = Arc::clone(&self.statements);
        // Each block ignores "already exists", so instances creating at once need no lock; DDL
        // commits on its own in Oracle.
        self.db
            .run(context, move |connection| {
                // One flag per migration: the length is the migrations', so a new file cannot be left out.
                let wanted: [bool; crate::statements::MIGRATIONS.len()] =
                    [plan.outbox, plan.dlq, plan.inbox, plan.jobs, plan.outbox, plan.inbox, plan.inbox];
                for (block, wanted) in statements.schema.iter().zip(wanted) {
                    if wanted {
                        connection.execute(block, &[]).context(context)?;
                    }
                }
                Ok(())
            })
            .await
    }

    fn daos(&self) -> Daos {
        Daos {
            outbox: Arc::new(self.ora_outbox_dao()),
            dlq: Arc::new(self.ora_dlq_dao()),
            inbox: Arc::new(self.ora_inbox_dao()),
            stored_inbox: Arc::new(self.ora_stored_inbox_dao()),
            job_lock: Arc::new(self.ora_job_lock()),
        }
    }

    fn writer(&self) -> OraWriter {
        OraWriter { statements: Arc::clone(&self.statements) }
    }
}
