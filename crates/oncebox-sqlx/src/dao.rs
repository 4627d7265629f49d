//! The DAOs of every sqlx dialect: each operation whose logic is the same on every database is
//! written here once, over [`Queries`], which a dialect implements for what really differs (how
//! values are bound, and the claim, settle and transfer statements whose shape differs between
//! databases; inbox records and job leases have defaults a dialect may override).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::last_error_text;
use oncebox_core::event::{DlqCounts, DlqFilter, DlqSelection, JobLease, OlderEvents, OutboxCounts};
use oncebox_core::inbox::{distinct, in_input_order};
use oncebox_core::stored::{
    InboxBatch, InboxCount, InboxMessage, InboxSettlement, LEASE_RAN_OUT, NewInboxMessage,
};
use oncebox_core::{
    ClaimedBatch, Daos, DlqDao, DlqEvent, DlqStatus, Error, ErrorKind, InboxClaim, InboxDao, JobLock,
    OutboxDao, OutboxEvent, Result, SettleReport, Settlement, StoredInboxDao, StoredInboxTransactions,
    TableNames, Transactions,
};
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Executor, IntoArguments, Pool, Row, Type};
use uuid::Uuid;

use crate::row::{DecodeRow, RowFormat, StoredValue, count, status_counts};
use crate::statement::{Param, Statement, Statements};

/// A statement of database `DB` with its values bound.
pub type BoundQuery<'q, DB> = Query<'q, DB, <DB as Database>::Arguments>;

/// What the shared operations need of a sqlx database, written once for every database sqlx
/// supports (the bounds that say so live on the one implementation below).
pub trait SqlxDatabase: Database<Arguments: IntoArguments<Self>> {
    /// `pool` as an executor, for code generic over the database (which cannot name the bound).
    fn pooled(pool: &Pool<Self>) -> impl Executor<'_, Database = Self>;

    /// `connection` as an executor, for code generic over the database.
    fn on(connection: &mut Self::Connection) -> impl Executor<'_, Database = Self>;

    /// Reads `column` of `row` as stored (`T`).
    fn column<T>(row: &Self::Row, column: &str) -> sqlx::Result<T>
    where
        T: for<'r> Decode<'r, Self> + Type<Self>;

    /// Reads a text `column` of `row`.
    fn text(row: &Self::Row, column: &str) -> sqlx::Result<String>;

    /// Reads an integer `column` of `row`.
    fn int(row: &Self::Row, column: &str) -> sqlx::Result<i64>;
}

impl<DB> SqlxDatabase for DB
where
    DB: Database<Arguments: IntoArguments<DB>>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'c> &'c str: ColumnIndex<DB::Row>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB> + Type<DB>,
{
    fn pooled(pool: &Pool<Self>) -> impl Executor<'_, Database = Self> {
        pool
    }

    fn on(connection: &mut Self::Connection) -> impl Executor<'_, Database = Self> {
        connection
    }

    fn column<T>(row: &Self::Row, column: &str) -> sqlx::Result<T>
    where
        T: for<'r> Decode<'r, Self> + Type<Self>,
    {
        row.try_get(column)
    }

    fn text(row: &Self::Row, column: &str) -> sqlx::Result<String> {
        row.try_get(column)
    }

    fn int(row: &Self::Row, column: &str) -> sqlx::Result<i64> {
        row.try_get(column)
    }
}

/// The SQL of one dialect: its statements for the configured tables, how it binds values, and
/// the operations whose shape differs between databases.
#[async_trait]
pub trait Queries: Send + Sync + Sized + 'static {
    /// The database.
    type Db: SqlxDatabase;
    /// How the database stores the outbox and DLQ columns.
    type Format: DecodeRow + RowFormat<Row = <Self::Db as Database>::Row>;
    /// The prefix of the dialect's public type names (`Pg` in `PgOutboxDao`), for `Debug`.
    const NAME: &'static str;
    /// The most ids one statement takes; longer lists are split.
    const MAX_IDS: usize = usize::MAX;

    /// Every statement rendered for `tables`.
    fn new(tables: &TableNames) -> Self;

    /// A statement of this database from its text, table names filled in: numbered placeholders
    /// the database reads itself (the default), or [`Statement::positional`] where it has only `?`.
    fn statement(sql: String) -> Statement {
        Statement::numbered(sql)
    }

    /// The statements of the shared operations.
    fn statements(&self) -> &Statements;

    /// The table names the statements were rendered for.
    fn tables(&self) -> &TableNames {
        self.statements().tables()
    }

    /// `statement` with `params` bound, in the statement's numbering.
    fn bind<'q>(&self, statement: &Statement, params: &[Param<'_>]) -> Result<BoundQuery<'q, Self::Db>>;

    /// A sqlx error with `context`, temporary or not as the database's error codes say (usually
    /// [`database_error`](crate::database_error) with the dialect's [`ServerErrors`](crate::ServerErrors)).
    fn error(context: &str, error: sqlx::Error) -> Error;

    /// The rows a statement changed.
    fn rows_affected(result: &<Self::Db as Database>::QueryResult) -> u64;

    /// Runs `statement` with `params` on `executor` (the pool, a connection or a transaction); the
    /// rows it changed.
    fn execute<'e, E>(
        &self,
        executor: E,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> impl Future<Output = Result<u64>> + Send
    where
        E: Executor<'e, Database = Self::Db> + 'e,
    {
        let query = self.bind(statement, params);
        async move {
            let result = executor.execute(query?).await.map_err(|error| Self::error(context, error))?;
            Ok(Self::rows_affected(&result))
        }
    }

    /// Runs `statement` with `params` on `executor` and reads every row.
    fn fetch_all<'e, E>(
        &self,
        executor: E,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> impl Future<Output = Result<Vec<<Self::Db as Database>::Row>>> + Send
    where
        E: Executor<'e, Database = Self::Db> + 'e,
    {
        let query = self.bind(statement, params);
        async move { executor.fetch_all(query?).await.map_err(|error| Self::error(context, error)) }
    }

    /// Runs `statement` on `connection` once per chunk of its id list (at most
    /// [`MAX_IDS`](Self::MAX_IDS) ids each), adding up the rows changed; an empty list runs
    /// nothing. Each chunk commits with the statement unless `connection` is in a transaction.
    async fn execute_over_ids(
        &self,
        connection: &mut <Self::Db as Database>::Connection,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<u64> {
        let list = params.iter().enumerate().find_map(|(at, param)| match param {
            Param::Ids(ids) => Some((at, *ids)),
            _ => None,
        });
        let Some((at, ids)) = list else {
            return self.execute(Self::Db::on(connection), statement, params, context).await;
        };
        let mut params = params.to_vec();
        let mut affected = 0;
        for chunk in ids.chunks(Self::MAX_IDS.max(1)) {
            params[at] = Param::Ids(chunk);
            affected += self.execute(Self::Db::on(&mut *connection), statement, &params, context).await?;
        }
        Ok(affected)
    }

    /// The ids in the `id` column of `rows`, in row order, read as `table` stores them.
    fn read_ids(rows: &[<Self::Db as Database>::Row], table: &str, context: &str) -> Result<Vec<Uuid>> {
        let read = |row| {
            let stored = Self::Db::column::<<Self::Format as RowFormat>::Uuid>(row, "id")
                .map_err(|error| Self::error(context, error))?;
            stored
                .into_model()
                .map_err(|problem| Error::new(ErrorKind::Decode, format!("{table}.id: {problem}")))
        };
        rows.iter().map(read).collect()
    }

    /// Claims up to `max_rows` due events of `event_type` (see [`OutboxDao::claim`]).
    async fn claim(&self, pool: &Pool<Self::Db>, event_type: &str, max_rows: u32) -> Result<ClaimedBatch>;

    /// Settles a batch, fenced by its claim token (see [`OutboxDao::settle`]).
    async fn settle(
        &self,
        pool: &Pool<Self::Db>,
        batch: &ClaimedBatch,
        settlements: &[Settlement],
    ) -> Result<SettleReport>;

    /// Moves up to `max_rows` failed events to the DLQ (see [`DlqDao::transfer_to_dlq`]).
    async fn transfer_to_dlq(&self, pool: &Pool<Self::Db>, max_rows: u32) -> Result<Vec<OutboxEvent>>;

    /// Moves up to `max_rows` DLQ events marked for retry back (see [`DlqDao::transfer_from_dlq`]).
    async fn transfer_from_dlq(&self, pool: &Pool<Self::Db>, max_rows: u32) -> Result<u64>;

    /// Runs an inbox insert that skips a row already there (`inbox_record`, `inbox_claim`) on
    /// `connection`; `true` when it inserted. The default reads the changed-row count; a dialect
    /// whose insert reports a duplicate as an error overrides it.
    async fn insert_new_on(
        &self,
        connection: &mut <Self::Db as Database>::Connection,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<bool> {
        Ok(self.execute(Self::Db::on(connection), statement, params, context).await? == 1)
    }

    /// Records one consumed id on `connection` (a pooled connection or a caller's transaction);
    /// `true` when it was new: `inbox_record`, an insert that skips a recorded id.
    async fn record_on(
        &self,
        connection: &mut <Self::Db as Database>::Connection,
        consumer: &str,
        id: Uuid,
    ) -> Result<bool> {
        let params = [Param::Text(consumer), Param::Id(id)];
        self.insert_new_on(connection, &self.statements().inbox_record, &params, "recording a consumed event")
            .await
    }

    /// Claims one id for a non-transactional effect (see [`InboxDao::claim`]): a new claim, else
    /// one whose lease ran out taken over, else whatever the record says.
    async fn claim_id(
        &self,
        pool: &Pool<Self::Db>,
        consumer: &str,
        id: Uuid,
        lease: Duration,
    ) -> Result<InboxClaim> {
        let context = "claiming a consumed event";
        let statements = self.statements();
        let token = Uuid::new_v4();
        let mut connection = pool.acquire().await.map_err(|error| Self::error(context, error))?;
        let params = [Param::Text(consumer), Param::Id(id), Param::Id(token)];
        if self.insert_new_on(&mut connection, &statements.inbox_claim, &params, context).await? {
            return Ok(InboxClaim::Taken(token));
        }
        let params = [Param::Text(consumer), Param::Id(id), Param::Id(token), Param::Before(lease)];
        if self.execute(Self::Db::on(&mut connection), &statements.inbox_take_over, &params, context).await?
            == 1
        {
            return Ok(InboxClaim::Taken(token));
        }
        let ids = [id];
        let params = [Param::Text(consumer), Param::Ids(&ids)];
        let rows = self
            .fetch_all(Self::Db::on(&mut connection), &statements.inbox_consumed, &params, context)
            .await?;
        // Not applied: in flight within its lease, or released a moment ago. Either way the
        // delivery runs again later and claims it then.
        Ok(if rows.is_empty() { InboxClaim::Held } else { InboxClaim::Done })
    }

    /// The statement that records a list of ids in one go and returns the `id` of each row it
    /// inserted (value 1 the consumer, value 2 the whole list, unsplit), where the database has
    /// one; without it (the default), [`record_many_on`](Self::record_many_on) records the ids one
    /// by one.
    fn inbox_record_many(&self) -> Option<&Statement> {
        None
    }

    /// Records a non-empty list of consumed ids on `connection`; the new ones in input order, each
    /// once.
    async fn record_many_on(
        &self,
        connection: &mut <Self::Db as Database>::Connection,
        consumer: &str,
        ids: &[Uuid],
    ) -> Result<Vec<Uuid>> {
        let context = "recording consumed events";
        let Some(statement) = self.inbox_record_many() else {
            let mut new = Vec::new();
            for id in distinct(ids) {
                if self.record_on(connection, consumer, id).await? {
                    new.push(id);
                }
            }
            return Ok(new);
        };
        let params = [Param::Text(consumer), Param::Ids(ids)];
        let rows = self.fetch_all(Self::Db::on(connection), statement, &params, context).await?;
        let new = Self::read_ids(&rows, self.tables().consumed(), context)?;
        Ok(in_input_order(ids, new.into_iter().collect()))
    }

    /// Records one consumed id on a connection of `pool` (see [`InboxDao::record`]).
    async fn record(&self, pool: &Pool<Self::Db>, consumer: &str, id: Uuid) -> Result<bool> {
        let context = "recording a consumed event";
        let mut connection = pool.acquire().await.map_err(|error| Self::error(context, error))?;
        self.record_on(&mut connection, consumer, id).await
    }

    /// Records a non-empty list of consumed ids on a connection of `pool` (see
    /// [`InboxDao::record_many`]): one statement when the dialect has
    /// [`inbox_record_many`](Self::inbox_record_many), otherwise one per id inside a transaction,
    /// so that the batch is recorded all or nothing either way.
    async fn record_many(&self, pool: &Pool<Self::Db>, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let context = "recording consumed events";
        let error = |error| Self::error(context, error);
        if self.inbox_record_many().is_some() {
            let mut connection = pool.acquire().await.map_err(error)?;
            return self.record_many_on(&mut connection, consumer, ids).await;
        }
        let mut tx = pool.begin().await.map_err(error)?;
        let new = self.record_many_on(&mut tx, consumer, ids).await?;
        tx.commit().await.map_err(error)?;
        Ok(new)
    }

    /// Settles a claimed durable inbox message PROCESSED on `connection` (a transactional
    /// handler's transaction), fenced by `token`; whether it was still the claim's (see
    /// [`StoredInboxTransactions::finish_in`]).
    async fn finish_stored_on(
        &self,
        connection: &mut <Self::Db as Database>::Connection,
        consumer: &str,
        id: Uuid,
        token: Uuid,
    ) -> Result<bool> {
        let params = [Param::Text(consumer), Param::Id(id), Param::Id(token)];
        let statement = &self.statements().stored_processed;
        let finished =
            self.execute(Self::Db::on(connection), statement, &params, "settling an inbox message").await?;
        Ok(finished == 1)
    }

    /// Begins a transaction that will write: the pool's usual one, or where the database locks
    /// for writing only at the first write (SQLite), one that takes the write lock at once, so
    /// that a claim's select and update see no other writer in between.
    async fn begin_write(
        &self,
        pool: &Pool<Self::Db>,
        context: &str,
    ) -> Result<sqlx::Transaction<'static, Self::Db>> {
        pool.begin().await.map_err(|error| Self::error(context, error))
    }

    /// Takes the lease of `job` for `owner` when it is free or has run out; whether it was taken.
    /// The default runs `job_try_lock`, one statement that changes the job's row only then.
    async fn try_lock(
        &self,
        pool: &Pool<Self::Db>,
        job: &str,
        owner: Uuid,
        lock_at_most_for: Duration,
    ) -> Result<bool> {
        let params = [Param::Text(job), Param::After(lock_at_most_for), Param::Id(owner)];
        let statement = &self.statements().job_try_lock;
        let taken =
            self.execute(Self::Db::pooled(pool), statement, &params, &format!("locking job {job}")).await?;
        Ok(taken == 1)
    }
}

/// A pool and a dialect's SQL for one set of tables: what a sqlx dialect is built on and every
/// shared DAO holds. Cheap to clone.
pub struct SqlxStore<Q: Queries> {
    pool: Pool<Q::Db>,
    queries: Arc<Q>,
}

impl<Q: Queries> Clone for SqlxStore<Q> {
    fn clone(&self) -> Self {
        Self { pool: self.pool.clone(), queries: Arc::clone(&self.queries) }
    }
}

/// The pool's transactions, for transactional handlers ([`Transactions`]); each dialect's own
/// implementation hands over to this one.
impl<Q: Queries> StoredInboxTransactions for SqlxStore<Q> {
    async fn finish_in(&self, tx: &mut Self::Tx, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        self.queries.finish_stored_on(tx, consumer, id, token).await
    }
}

impl<Q: Queries> Transactions for SqlxStore<Q> {
    type Tx = sqlx::Transaction<'static, Q::Db>;

    async fn begin(&self) -> Result<Self::Tx> {
        self.pool.begin().await.map_err(|error| Q::error("beginning a transaction", error))
    }

    async fn commit(&self, tx: Self::Tx) -> Result<()> {
        tx.commit().await.map_err(|error| Q::error("committing a transaction", error))
    }

    async fn rollback(&self, tx: Self::Tx) -> Result<()> {
        tx.rollback().await.map_err(|error| Q::error("rolling back a transaction", error))
    }
}

/// `impl Transactions for <dialect>` handing over to the dialect's [`SqlxStore`] (its `store`
/// field), whose transactions are `sqlx::Transaction<'static, <database>>`: the pool's transactions
/// for a listener's transactional handlers
/// ([`Handlers::on_in`](oncebox_core::consume::Handlers::on_in)).
#[macro_export]
macro_rules! store_transactions {
    ($dialect:ty, $database:ty) => {
        /// The pool's transactions, for a listener's transactional handlers
        /// ([`Handlers::on_in`](oncebox_core::consume::Handlers::on_in)).
        impl oncebox_core::Transactions for $dialect {
            type Tx = sqlx::Transaction<'static, $database>;

            fn begin(&self) -> impl std::future::Future<Output = oncebox_core::Result<Self::Tx>> + Send {
                oncebox_core::Transactions::begin(&self.store)
            }

            fn commit(
                &self,
                tx: Self::Tx,
            ) -> impl std::future::Future<Output = oncebox_core::Result<()>> + Send {
                oncebox_core::Transactions::commit(&self.store, tx)
            }

            fn rollback(
                &self,
                tx: Self::Tx,
            ) -> impl std::future::Future<Output = oncebox_core::Result<()>> + Send {
                oncebox_core::Transactions::rollback(&self.store, tx)
            }
        }

        /// Settles durable inbox messages in a transactional handler's transaction.
        impl oncebox_core::StoredInboxTransactions for $dialect {
            fn finish_in(
                &self,
                tx: &mut Self::Tx,
                consumer: &str,
                id: uuid::Uuid,
                token: uuid::Uuid,
            ) -> impl std::future::Future<Output = oncebox_core::Result<bool>> + Send {
                oncebox_core::StoredInboxTransactions::finish_in(&self.store, tx, consumer, id, token)
            }
        }
    };
}

impl<Q: Queries> std::fmt::Debug for SqlxStore<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlxStore").field("dialect", &Q::NAME).field("tables", self.tables()).finish()
    }
}

impl<Q: Queries> SqlxStore<Q> {
    /// `pool` with the statements for `tables`.
    pub fn new(pool: Pool<Q::Db>, tables: &TableNames) -> Self {
        Self { pool, queries: Arc::new(Q::new(tables)) }
    }

    /// The same pool with the statements for `tables`.
    #[must_use]
    pub fn with_tables(self, tables: &TableNames) -> Self {
        Self::new(self.pool, tables)
    }

    /// The pool, for the caller's own transactions.
    pub fn pool(&self) -> &Pool<Q::Db> {
        &self.pool
    }

    /// The dialect's SQL.
    pub fn queries(&self) -> &Arc<Q> {
        &self.queries
    }

    /// The table names in use.
    pub fn tables(&self) -> &TableNames {
        self.statements().tables()
    }

    /// The outbox DAO as its concrete type.
    pub fn outbox_dao(&self) -> SqlxOutboxDao<Q> {
        SqlxOutboxDao(self.clone())
    }

    /// The DLQ DAO as its concrete type.
    pub fn dlq_dao(&self) -> SqlxDlqDao<Q> {
        SqlxDlqDao(self.clone())
    }

    /// The inbox DAO as its concrete type.
    pub fn inbox_dao(&self) -> SqlxInboxDao<Q> {
        SqlxInboxDao(self.clone())
    }

    /// The durable inbox DAO as its concrete type.
    pub fn stored_inbox_dao(&self) -> SqlxStoredInboxDao<Q> {
        SqlxStoredInboxDao(self.clone())
    }

    /// The job lock as its concrete type.
    pub fn job_lock(&self) -> SqlxJobLock<Q> {
        SqlxJobLock(self.clone())
    }

    /// Every DAO, as the engine holds them.
    pub fn daos(&self) -> Daos {
        Daos {
            outbox: Arc::new(self.outbox_dao()),
            dlq: Arc::new(self.dlq_dao()),
            inbox: Arc::new(self.inbox_dao()),
            stored_inbox: Arc::new(self.stored_inbox_dao()),
            job_lock: Arc::new(self.job_lock()),
        }
    }

    fn statements(&self) -> &Statements {
        self.queries.statements()
    }

    async fn execute(&self, statement: &Statement, params: &[Param<'_>], context: &str) -> Result<u64> {
        self.queries.execute(Q::Db::pooled(&self.pool), statement, params, context).await
    }

    async fn fetch_all(
        &self,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<Vec<<Q::Db as Database>::Row>> {
        self.queries.fetch_all(Q::Db::pooled(&self.pool), statement, params, context).await
    }

    /// The first row `statement` reads, for statements that read at most one.
    async fn fetch_first(
        &self,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<Option<<Q::Db as Database>::Row>> {
        Ok(self.fetch_all(statement, params, context).await?.into_iter().next())
    }

    /// [`Queries::execute_over_ids`] on one connection of the pool.
    async fn execute_over_ids(
        &self,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<u64> {
        let mut connection = self.pool.acquire().await.map_err(|error| Q::error(context, error))?;
        self.queries.execute_over_ids(&mut connection, statement, params, context).await
    }

    /// Reads `(event_type, status, rows, extra)` groups with `statement`; `extra` is the integer
    /// column `extra` names, or 0.
    async fn status_groups(
        &self,
        statement: &Statement,
        status: &str,
        extra: Option<&str>,
        context: &str,
    ) -> Result<Vec<(String, String, i64, i64)>> {
        let rows = self.fetch_all(statement, &[], context).await?;
        rows.iter()
            .map(|row| {
                let read = || -> sqlx::Result<_> {
                    Ok((
                        Q::Db::text(row, "event_type")?,
                        Q::Db::text(row, status)?,
                        Q::Db::int(row, "row_count")?,
                        extra.map(|column| Q::Db::int(row, column)).transpose()?.unwrap_or_default(),
                    ))
                };
                read().map_err(|error| Q::error(context, error))
            })
            .collect()
    }
}

/// Writes `Debug` for a shared DAO as `<dialect><kind> { table: … }`.
fn debug_table(f: &mut std::fmt::Formatter<'_>, name: &str, kind: &str, table: &str) -> std::fmt::Result {
    f.debug_struct(&format!("{name}{kind}")).field("table", &table).finish()
}

/// The bound value of a row limit.
pub fn limit(max_rows: u32) -> Param<'static> {
    Param::Int(i64::from(max_rows))
}

/// [`OutboxDao`] over a dialect's [`Queries`].
pub struct SqlxOutboxDao<Q: Queries>(SqlxStore<Q>);

/// [`DlqDao`] over a dialect's [`Queries`].
pub struct SqlxDlqDao<Q: Queries>(SqlxStore<Q>);

/// [`InboxDao`] over a dialect's [`Queries`].
pub struct SqlxInboxDao<Q: Queries>(SqlxStore<Q>);

/// [`JobLock`] over a dialect's [`Queries`], timed by the database clock.
pub struct SqlxJobLock<Q: Queries>(SqlxStore<Q>);

/// [`StoredInboxDao`] over a dialect's [`Queries`].
pub struct SqlxStoredInboxDao<Q: Queries>(SqlxStore<Q>);

macro_rules! shared_dao {
    ($($dao:ident: $kind:literal, $table:ident;)*) => {$(
        impl<Q: Queries> Clone for $dao<Q> {
            fn clone(&self) -> Self {
                Self(self.0.clone())
            }
        }

        impl<Q: Queries> std::fmt::Debug for $dao<Q> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                debug_table(f, Q::NAME, $kind, self.0.statements().tables.$table())
            }
        }
    )*};
}

shared_dao! {
    SqlxOutboxDao: "OutboxDao", events;
    SqlxDlqDao: "DlqDao", dlq;
    SqlxInboxDao: "InboxDao", consumed;
    SqlxJobLock: "JobLock", jobs;
    SqlxStoredInboxDao: "StoredInboxDao", inbox;
}

#[async_trait]
impl<Q: Queries> OutboxDao for SqlxOutboxDao<Q> {
    async fn claim(&self, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        if max_rows == 0 {
            return Ok(ClaimedBatch {
                event_type: event_type.to_owned(),
                claim_token: Uuid::now_v7(),
                events: Vec::new(),
            });
        }
        self.0.queries.claim(&self.0.pool, event_type, max_rows).await
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        self.0.queries.settle(&self.0.pool, batch, settlements).await
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let params = [Param::Before(older_than), limit(max_rows), Param::Int(i64::from(max_recoveries))];
        self.0.execute(&self.0.statements().recover_stuck, &params, "recovering stuck events").await
    }

    async fn delete_processed(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let params = [Param::Before(older_than), limit(max_rows)];
        self.0.execute(&self.0.statements().delete_processed, &params, "deleting processed events").await
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        let statements = self.0.statements();
        let row =
            self.0.fetch_first(&statements.get_event, &[Param::Id(id)], "reading an outbox event").await?;
        row.map(|row| Q::Format::decode_event(&row, statements.tables.events())).transpose()
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        let statements = self.0.statements();
        let groups =
            self.0.status_groups(&statements.count_events, "status", None, "counting outbox events").await?;
        let pending = self
            .0
            .status_groups(
                &statements.oldest_pending,
                "status",
                Some("oldest_age_ms"),
                "aging pending events",
            )
            .await?;
        // A row written a moment "after" the database's now() (a clock step) is 0 ms old.
        let oldest_pending = pending
            .into_iter()
            .map(|(event_type, _, _, age_ms)| {
                (event_type, Duration::from_millis(u64::try_from(age_ms).unwrap_or_default()))
            })
            .collect();
        let counts =
            groups.into_iter().map(|(event_type, status, count, _)| (event_type, status, count)).collect();
        Ok(OutboxCounts {
            by_type_and_status: status_counts(counts, statements.tables.events(), "status")?,
            oldest_pending,
        })
    }
}

impl<Q: Queries> SqlxDlqDao<Q> {
    /// Runs `by_ids` over the ids of `selection` (chunked), or `by_type` for its event type, with
    /// `first` bound before them when given.
    async fn by_selection(
        &self,
        selection: &DlqSelection,
        [by_ids, by_type]: [&Statement; 2],
        first: Option<Param<'_>>,
        context: &str,
    ) -> Result<u64> {
        let mut params: Vec<Param<'_>> = first.into_iter().collect();
        match selection {
            DlqSelection::Ids(ids) if ids.is_empty() => Ok(0),
            DlqSelection::Ids(ids) => {
                params.push(Param::Ids(ids));
                self.0.execute_over_ids(by_ids, &params, context).await
            }
            DlqSelection::EventType(event_type) => {
                params.push(Param::Text(event_type));
                self.0.execute(by_type, &params, context).await
            }
        }
    }
}

/// The bound values of a DLQ filter.
fn filter_params(filter: &DlqFilter) -> [Param<'_>; 2] {
    [
        Param::OptionalText(filter.status.map(DlqStatus::as_str)),
        Param::OptionalText(filter.event_type.as_deref()),
    ]
}

#[async_trait]
impl<Q: Queries> DlqDao for SqlxDlqDao<Q> {
    async fn transfer_to_dlq(&self, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        self.0.queries.transfer_to_dlq(&self.0.pool, max_rows).await
    }

    async fn transfer_from_dlq(&self, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        self.0.queries.transfer_from_dlq(&self.0.pool, max_rows).await
    }

    async fn delete_resolved(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let params = [Param::Before(older_than), limit(max_rows)];
        self.0
            .execute(&self.0.statements().dlq_delete_resolved, &params, "deleting resolved DLQ events")
            .await
    }

    async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>> {
        let statements = self.0.statements();
        let row = self.0.fetch_first(&statements.dlq_get, &[Param::Id(id)], "reading a DLQ event").await?;
        row.map(|row| Q::Format::decode_dlq_event(&row, statements.tables.dlq())).transpose()
    }

    async fn list(&self, filter: &DlqFilter, offset: u64, max_rows: u32) -> Result<Vec<DlqEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let statements = self.0.statements();
        let [status, event_type] = filter_params(filter);
        let params =
            [status, event_type, limit(max_rows), Param::Int(i64::try_from(offset).unwrap_or(i64::MAX))];
        let rows = self.0.fetch_all(&statements.dlq_list, &params, "listing DLQ events").await?;
        let decoded = Q::Format::decode_dlq_events(&rows, statements.tables.dlq())?;
        decoded.warn_left_out("a dead letter queue row");
        Ok(decoded.rows)
    }

    async fn count(&self, filter: &DlqFilter) -> Result<u64> {
        let context = "counting DLQ events";
        let row = self.0.fetch_first(&self.0.statements().dlq_count, &filter_params(filter), context).await?;
        let rows = row
            .map(|row| Q::Db::int(&row, "row_count"))
            .transpose()
            .map_err(|error| Q::error(context, error))?;
        Ok(count(rows.unwrap_or_default()))
    }

    async fn set_status(&self, selection: &DlqSelection, status: DlqStatus) -> Result<u64> {
        if !status.is_settable() {
            return Err(Error::invalid_input(format!(
                "DLQ status {status} cannot be set; use MOVED, RESOLVED or TO_RETRY"
            )));
        }
        let statements = self.0.statements();
        let by = [&statements.dlq_set_status_by_ids, &statements.dlq_set_status_by_type];
        self.by_selection(
            selection,
            by,
            Some(Param::Text(status.as_str())),
            "changing the status of DLQ events",
        )
        .await
    }

    async fn delete(&self, selection: &DlqSelection) -> Result<u64> {
        let statements = self.0.statements();
        let by = [&statements.dlq_delete_by_ids, &statements.dlq_delete_by_type];
        self.by_selection(selection, by, None, "deleting DLQ events").await
    }

    async fn older_than(&self, selection: &DlqSelection, age: Duration) -> Result<OlderEvents> {
        let context = "aging DLQ events";
        let statements = self.0.statements();
        let read = |row: Option<<Q::Db as Database>::Row>| -> Result<OlderEvents> {
            let Some(row) = row else {
                return Ok(OlderEvents::default());
            };
            let read = || -> sqlx::Result<_> {
                Ok(OlderEvents::from_aggregate(
                    Q::Db::int(&row, "row_count")?,
                    Q::Db::int(&row, "oldest_age_ms")?,
                ))
            };
            read().map_err(|error| Q::error(context, error))
        };
        match selection {
            DlqSelection::Ids(ids) => {
                let mut older = OlderEvents::default();
                for chunk in ids.chunks(Q::MAX_IDS.max(1)) {
                    let params = [Param::Before(age), Param::Ids(chunk)];
                    older = older.and(read(
                        self.0.fetch_first(&statements.dlq_older_by_ids, &params, context).await?,
                    )?);
                }
                Ok(older)
            }
            DlqSelection::EventType(event_type) => {
                let params = [Param::Before(age), Param::Text(event_type)];
                read(self.0.fetch_first(&statements.dlq_older_by_type, &params, context).await?)
            }
        }
    }

    async fn counts(&self) -> Result<DlqCounts> {
        let statements = self.0.statements();
        let groups =
            self.0.status_groups(&statements.dlq_counts, "dlq_status", None, "counting DLQ events").await?;
        let counts =
            groups.into_iter().map(|(event_type, status, count, _)| (event_type, status, count)).collect();
        Ok(DlqCounts { by_type_and_status: status_counts(counts, statements.tables.dlq(), "dlq_status")? })
    }
}

#[async_trait]
impl<Q: Queries> InboxDao for SqlxInboxDao<Q> {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        self.0.queries.record(&self.0.pool, consumer, id).await
    }

    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.0.queries.record_many(&self.0.pool, consumer, ids).await
    }

    async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim> {
        self.0.queries.claim_id(&self.0.pool, consumer, id, lease).await
    }

    async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        let params = [Param::Text(consumer), Param::Id(id), Param::Id(token)];
        let finished = self
            .0
            .execute(&self.0.statements().inbox_finish, &params, "marking a consumed event applied")
            .await?;
        Ok(finished == 1)
    }

    async fn release(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        let params = [Param::Text(consumer), Param::Id(id), Param::Id(token)];
        let released =
            self.0.execute(&self.0.statements().inbox_release, &params, "releasing a consumed event").await?;
        Ok(released == 1)
    }

    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let context = "looking up consumed events";
        let statements = self.0.statements();
        let mut recorded = HashSet::new();
        for chunk in ids.chunks(Q::MAX_IDS.max(1)) {
            let params = [Param::Text(consumer), Param::Ids(chunk)];
            let rows = self.0.fetch_all(&statements.inbox_consumed, &params, context).await?;
            recorded.extend(Q::read_ids(&rows, statements.tables.consumed(), context)?);
        }
        Ok(in_input_order(ids, recorded))
    }

    async fn delete_older_than(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let params = [Param::Before(older_than), limit(max_rows)];
        self.0
            .execute(&self.0.statements().inbox_delete_older_than, &params, "deleting old consumed events")
            .await
    }
}

#[async_trait]
impl<Q: Queries> JobLock for SqlxJobLock<Q> {
    async fn try_lock(
        &self,
        job: &str,
        owner: Uuid,
        lock_at_least_for: Duration,
        lock_at_most_for: Duration,
    ) -> Result<Option<JobLease>> {
        let taken = self.0.queries.try_lock(&self.0.pool, job, owner, lock_at_most_for).await?;
        Ok(taken.then(|| JobLease { job: job.to_owned(), owner, lock_at_least_for }))
    }

    async fn unlock(&self, lease: &JobLease) -> Result<()> {
        let params = [Param::Text(&lease.job), Param::Id(lease.owner), Param::After(lease.lock_at_least_for)];
        self.0
            .execute(&self.0.statements().job_unlock, &params, &format!("unlocking job {}", lease.job))
            .await?;
        Ok(())
    }
}

#[async_trait]
impl<Q: Queries> StoredInboxDao for SqlxStoredInboxDao<Q> {
    async fn store(&self, message: &NewInboxMessage) -> Result<bool> {
        let context = "storing an inbox message";
        let headers = serde_json::to_string(&message.headers)?;
        let params = [
            Param::Text(&message.consumer),
            Param::Id(message.id),
            Param::Text(&message.event_type),
            Param::OptionalText(message.payload_type.as_deref()),
            Param::Bytes(&message.payload),
            Param::Text(&headers),
            Param::Text(&message.source),
            Param::OptionalText(message.correlation_id.as_deref()),
            Param::OptionalTime(message.created_at),
        ];
        let mut connection = self.0.pool.acquire().await.map_err(|error| Q::error(context, error))?;
        self.0
            .queries
            .insert_new_on(&mut connection, &self.0.statements().stored_insert, &params, context)
            .await
    }

    async fn claim(&self, consumer: &str, event_type: &str, max_rows: u32) -> Result<InboxBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = InboxBatch { claim_token, messages: Vec::new() };
        if max_rows == 0 {
            return Ok(batch);
        }
        // The claimed ids are read back in one statement.
        let max_rows = max_rows.min(u32::try_from(Q::MAX_IDS).unwrap_or(u32::MAX));
        let context = format!("claiming inbox messages of {consumer} ({event_type})");
        let (queries, statements) = (&self.0.queries, self.0.statements());
        let mut tx = queries.begin_write(&self.0.pool, &context).await?;
        let params = [Param::Text(consumer), Param::Text(event_type), limit(max_rows)];
        let due = queries.fetch_all(Q::Db::on(&mut *tx), &statements.stored_due, &params, &context).await?;
        let ids = Q::read_ids(&due, statements.tables.inbox(), &context)?;
        if !ids.is_empty() {
            let params = [Param::Text(consumer), Param::Id(claim_token), Param::Ids(&ids)];
            queries.execute_over_ids(&mut tx, &statements.stored_mark, &params, &context).await?;
        }
        tx.commit().await.map_err(|error| Q::error(&context, error))?;
        if ids.is_empty() {
            return Ok(batch);
        }
        let params = [Param::Text(consumer), Param::Id(claim_token), Param::Ids(&ids)];
        let rows = self.0.fetch_all(&statements.stored_claimed, &params, &context).await?;
        batch.messages = rows
            .iter()
            .map(|row| Q::Format::decode_inbox_message(row, statements.tables.inbox()))
            .collect::<Result<Vec<InboxMessage>>>()?;
        batch.sort_oldest_first();
        Ok(batch)
    }

    async fn settle(
        &self,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        settlement: &InboxSettlement,
    ) -> Result<bool> {
        let context = "settling an inbox message";
        let statements = self.0.statements();
        let (consumer, id, token) = (Param::Text(consumer), Param::Id(id), Param::Id(token));
        let settled = match settlement {
            InboxSettlement::Processed => {
                self.0.execute(&statements.stored_processed, &[consumer, id, token], context).await?
            }
            InboxSettlement::Retry { after, error } => {
                let params = [consumer, id, token, Param::After(*after), Param::Text(last_error_text(error))];
                self.0.execute(&statements.stored_retry, &params, context).await?
            }
            InboxSettlement::Failed { error } => {
                let params = [consumer, id, token, Param::Text(last_error_text(error))];
                self.0.execute(&statements.stored_failed, &params, context).await?
            }
        };
        Ok(settled == 1)
    }

    async fn recover_stuck(&self, consumer: &str, lease: Duration, max_attempts: u32) -> Result<u64> {
        let params = [
            Param::Text(consumer),
            Param::Before(lease),
            Param::Int(i64::from(max_attempts)),
            Param::Text(LEASE_RAN_OUT),
        ];
        self.0.execute(&self.0.statements().stored_recover, &params, "recovering stuck inbox messages").await
    }

    async fn delete_processed(&self, consumer: &str, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let params = [Param::Text(consumer), Param::Before(older_than), limit(max_rows)];
        self.0.execute(&self.0.statements().stored_delete, &params, "deleting processed inbox messages").await
    }

    async fn get(&self, consumer: &str, id: Uuid) -> Result<Option<InboxMessage>> {
        let params = [Param::Text(consumer), Param::Id(id)];
        let statements = self.0.statements();
        let row = self.0.fetch_first(&statements.stored_get, &params, "reading an inbox message").await?;
        row.map(|row| Q::Format::decode_inbox_message(&row, statements.tables.inbox())).transpose()
    }

    async fn counts(&self) -> Result<Vec<InboxCount>> {
        let context = "counting inbox messages";
        let statements = self.0.statements();
        let rows = self.0.fetch_all(&statements.stored_counts, &[], context).await?;
        let table = statements.tables.inbox();
        rows.iter()
            .map(|row| {
                let text = |column| Q::Db::text(row, column).map_err(|error| Q::error(context, error));
                let status = text("status")?;
                let count = Q::Db::int(row, "row_count").map_err(|error| Q::error(context, error))?;
                Ok(InboxCount {
                    consumer: text("consumer")?,
                    event_type: text("event_type")?,
                    status: status.parse().map_err(|_| {
                        Error::new(
                            ErrorKind::Decode,
                            format!("{table}.status: unknown inbox status '{status}'"),
                        )
                    })?,
                    rows: u64::try_from(count).unwrap_or(0),
                })
            })
            .collect()
    }
}
