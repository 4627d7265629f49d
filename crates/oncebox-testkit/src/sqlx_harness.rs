//! What every [`DaoHarness`](crate::DaoHarness) of a sqlx dialect does alike: the caller's
//! transaction around a write, and dropping a test's tables.

use oncebox_core::{Error, Result, TableNames};
use sqlx::{AssertSqlSafe, Database, Executor, Pool, Transaction};

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
pub async fn drop_tables<DB: Database>(pool: &Pool<DB>, tables: &TableNames) -> Result<()>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let sql = format!(
        "DROP TABLE IF EXISTS {}, {}, {}, {}",
        tables.events(),
        tables.dlq(),
        tables.consumed(),
        tables.jobs()
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await.map_err(sql_error("dropping"))?;
    Ok(())
}
