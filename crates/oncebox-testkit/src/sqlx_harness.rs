//! What every [`DaoHarness`] of a sqlx dialect does alike, written once: [`SqlxHarness`] runs a
//! write in the caller's transaction, raw SQL on a test's tables and the clean-up, and asks its
//! [`SqlxBackend`] only for what differs between databases (connecting, and the SQL fragments of
//! interval arithmetic, an id list and the headers column); values are bound by the dialect's own
//! [`Queries::bind`].

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{
    Dialect, Error, InboxWriter, NewOutboxEvent, OutboxWriter, Result, SchemaPlan, StoredInboxTransactions,
    TableNames,
};
use oncebox_sqlx::{Param, Queries, SqlxDatabase, SqlxStore};
use sqlx::{AssertSqlSafe, Database, Pool, Transaction};
use uuid::Uuid;

use crate::harness::{AgedTable, DaoHarness};
use crate::random_prefix;

/// A sqlx error while `context`, as the harness reports it.
pub fn sql_error(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |error| Error::database(context.to_owned(), false, error)
}

/// Begins a transaction on `pool`, as a service opens one around its business rows and the
/// writer's.
pub async fn begin<DB: Database>(pool: &Pool<DB>) -> Result<Transaction<'static, DB>> {
    pool.begin().await.map_err(sql_error("beginning"))
}

/// Commits `tx` (`commit: true`) or rolls it back.
pub async fn end<DB: Database>(tx: Transaction<'_, DB>, commit: bool) -> Result<()> {
    if commit {
        tx.commit().await.map_err(sql_error("committing"))
    } else {
        tx.rollback().await.map_err(sql_error("rolling back"))
    }
}

/// Drops the four tables of `tables` on `pool`, where they exist.
pub async fn drop_tables<DB: SqlxDatabase>(pool: &Pool<DB>, tables: &TableNames) -> Result<()> {
    let sql = format!(
        "DROP TABLE IF EXISTS {}, {}, {}, {}, {}",
        tables.events(),
        tables.dlq(),
        tables.consumed(),
        tables.inbox(),
        tables.jobs()
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(DB::pooled(pool)).await.map_err(sql_error("dropping"))?;
    Ok(())
}

/// What a sqlx database's harness must say for itself; [`SqlxHarness`] does the rest, binding
/// values the dialect's way ([`Queries::bind`]).
///
/// A server backend implements [`connect`](Self::connect), and the defaults give every test a
/// random table prefix, further instances on pools of their own and dropped tables at the end.
#[async_trait]
pub trait SqlxBackend: Send + Sync + 'static {
    /// The dialect's SQL.
    type Queries: Queries;
    /// The dialect under test.
    type Dialect: Dialect + Clone;

    /// The condition that a row's `id` is in the list bound as value 2 (a [`Param::Ids`]).
    const ID_IN_LIST: &'static str;

    /// The `SET … WHERE …` that writes the headers text bound as value 1 to the row whose id is
    /// value 2.
    const SET_HEADERS: &'static str;

    /// The dialect's pool and statements.
    fn store(dialect: &Self::Dialect) -> &SqlxStore<Self::Queries>;

    /// The assignment that moves `column` back by the span bound as value 1 (a
    /// [`Param::Before`]); NULL stays NULL.
    fn earlier(column: &str) -> String;

    /// A dialect on a new pool of `pool_size` connections, using `prefix`, with no tables created.
    async fn connect(&self, prefix: &str, pool_size: u32) -> Result<Self::Dialect>;

    /// The table prefix of the next fresh dialect; by default a [random one](random_prefix).
    fn prefix(&self) -> String {
        random_prefix()
    }

    /// See [`DaoHarness::fresh`]. The default connects with the next [prefix](Self::prefix) and
    /// creates every table.
    async fn fresh(&self) -> Result<Self::Dialect> {
        let dialect = self.connect(&self.prefix(), POOL_SIZE).await?;
        dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
        Ok(dialect)
    }

    /// See [`DaoHarness::another_instance`]. The default connects again with the same prefix.
    async fn another_instance(&self, dialect: &Self::Dialect) -> Result<Option<Self::Dialect>> {
        Ok(Some(self.connect(Self::store(dialect).tables().prefix(), INSTANCE_POOL_SIZE).await?))
    }

    /// See [`DaoHarness::dispose`]. The default drops the tables and closes the pool.
    async fn dispose(&self, dialect: Self::Dialect) -> Result<()> {
        let store = Self::store(&dialect);
        let dropped = drop_tables(store.pool(), store.tables()).await;
        store.pool().close().await;
        dropped
    }
}

/// The database of backend `B`.
type Db<B> = <<B as SqlxBackend>::Queries as Queries>::Db;

/// Connections per test dialect: enough for the concurrent cases, few enough that two tests at a
/// time stay far below a server's connection limit.
pub const POOL_SIZE: u32 = 8;

/// Connections of each further instance over a test's tables: the cases run up to four instances
/// beside the test's own pool.
pub const INSTANCE_POOL_SIZE: u32 = 4;

/// The [`DaoHarness`] of a sqlx dialect, over its [`SqlxBackend`].
pub struct SqlxHarness<B>(pub B);

impl<B: SqlxBackend> SqlxHarness<B> {
    /// Runs `sql` (its table names already filled in) on `dialect`'s pool, with `params` bound the
    /// dialect's way.
    async fn run(
        &self,
        dialect: &B::Dialect,
        sql: String,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<()> {
        let store = B::store(dialect);
        let pool = Db::<B>::pooled(store.pool());
        store.queries().execute(pool, &B::Queries::statement(sql), params, context).await?;
        Ok(())
    }
}

#[async_trait]
impl<B: SqlxBackend> DaoHarness for SqlxHarness<B>
where
    for<'t, 'c> <B::Dialect as Dialect>::Writer:
        OutboxWriter<&'t mut Transaction<'c, Db<B>>> + InboxWriter<Transaction<'c, Db<B>>>,
{
    type Dialect = B::Dialect;

    async fn fresh(&self) -> Result<B::Dialect> {
        self.0.fresh().await
    }

    async fn publish(&self, dialect: &B::Dialect, events: &[NewOutboxEvent], commit: bool) -> Result<()> {
        let mut tx = begin(B::store(dialect).pool()).await?;
        dialect.writer().write(&mut tx, events).await?;
        end(tx, commit).await
    }

    async fn record_in_transaction(
        &self,
        dialect: &B::Dialect,
        consumer: &str,
        ids: &[Uuid],
        commit: bool,
    ) -> Result<Vec<Uuid>> {
        let mut tx = begin(B::store(dialect).pool()).await?;
        let new = dialect.writer().record_many(&mut tx, consumer, ids).await?;
        end(tx, commit).await?;
        Ok(new)
    }

    async fn finish_stored_in_transaction(
        &self,
        dialect: &B::Dialect,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        commit: bool,
    ) -> Result<bool> {
        let store = B::store(dialect);
        let mut tx = begin(store.pool()).await?;
        let finished = store.finish_in(&mut tx, consumer, id, token).await?;
        end(tx, commit).await?;
        Ok(finished)
    }

    async fn backdate(
        &self,
        dialect: &B::Dialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()> {
        let mut params = vec![Param::Before(by)];
        // Job locks have no id column; they are always backdated whole.
        let filter = if table.keyed_by_id() && !ids.is_empty() {
            params.push(Param::Ids(ids));
            B::ID_IN_LIST
        } else {
            "TRUE"
        };
        let sql = table.backdate_statement(B::store(dialect).tables(), B::earlier, filter);
        self.run(dialect, sql, &params, "backdating").await
    }

    async fn overwrite_headers(
        &self,
        dialect: &B::Dialect,
        table: AgedTable,
        id: Uuid,
        text: &str,
    ) -> Result<()> {
        let table = table.name(B::store(dialect).tables());
        let sql = format!("UPDATE {table} SET {}", B::SET_HEADERS);
        self.run(dialect, sql, &[Param::Text(text), Param::Id(id)], "overwriting headers").await
    }

    async fn execute_sql(&self, dialect: &B::Dialect, sql: &str) -> Result<()> {
        let store = B::store(dialect);
        let sql = store.tables().render(sql);
        let pool = Db::<B>::pooled(store.pool());
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await.map_err(sql_error("executing"))?;
        Ok(())
    }

    async fn dispose(&self, dialect: B::Dialect) -> Result<()> {
        self.0.dispose(dialect).await
    }

    async fn another_instance(&self, dialect: &B::Dialect) -> Result<Option<B::Dialect>> {
        self.0.another_instance(dialect).await
    }

    async fn close_instance(&self, instance: B::Dialect) -> Result<()> {
        B::store(&instance).pool().close().await;
        Ok(())
    }
}
