//! The connection side: the pool behind the bounded blocking runner, one transaction per DAO
//! call, and the few ways a statement is run (named binds only, id lists split at
//! [`MAX_IDS`](crate::statements::MAX_IDS), locking cursors that fetch only what they may lock).

use std::sync::Arc;
use std::time::Duration;

use oncebox_core::Result;
use oracle::sql_type::ToSql;
use oracle::{Connection, Row};

use crate::blocking::{Bounded, Source};
use crate::error::OraResultExt;
use crate::statements::{MAX_IDS, Statements, id_names, with_ids};

/// The largest fetch array and prefetch of a locking cursor.
const MAX_FETCH_ARRAY: u32 = 500;

/// A named bind: the placeholder's name without the colon, and its value.
pub(crate) type Bind<'a> = (&'a str, &'a dyn ToSql);

/// Connections of an `oracle` session pool, each with the call timeout set.
pub(crate) struct OraSource {
    pub(crate) pool: oracle::pool::Pool,
    pub(crate) call_timeout: Option<Duration>,
}

impl Source for OraSource {
    type Connection = Connection;

    fn get(&self) -> Result<Connection> {
        let connection = self.pool.get().context("taking a connection from the Oracle pool")?;
        connection.set_call_timeout(self.call_timeout).context("setting the call timeout")?;
        Ok(connection)
    }
}

/// The runner every DAO shares.
pub(crate) type Db = Bounded<OraSource>;

/// Runs `work` as one transaction on `connection`: committed when it succeeds, rolled back when
/// it fails, so a pooled connection never goes back with open work.
pub(crate) fn transaction<T>(
    connection: &Connection,
    context: &str,
    work: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    match work(connection) {
        Ok(value) => {
            connection.commit().context(context)?;
            Ok(value)
        }
        Err(error) => {
            if let Err(rollback) = connection.rollback() {
                tracing::warn!(%rollback, "{context}: rolling back after an error failed too");
            }
            Err(error)
        }
    }
}

/// Runs a statement; the rows it changed.
pub(crate) fn execute(connection: &Connection, sql: &str, binds: &[Bind<'_>], context: &str) -> Result<u64> {
    let statement = connection.execute_named(sql, binds).context(context)?;
    statement.row_count().context(context)
}

/// Runs a query and reads every row.
pub(crate) fn query(
    connection: &Connection,
    sql: &str,
    binds: &[Bind<'_>],
    context: &str,
) -> Result<Vec<Row>> {
    let rows = connection.query_named(sql, binds).context(context)?;
    rows.map(|row| row.context(context)).collect()
}

/// Opens a `FOR UPDATE SKIP LOCKED` cursor and reads at most `max_rows` rows. Oracle locks a
/// row of such a cursor when it fetches it, so prefetching and the fetch array are sized to
/// `max_rows`: no row is locked that is not returned.
pub(crate) fn lock(
    connection: &Connection,
    sql: &str,
    binds: &[Bind<'_>],
    max_rows: u32,
    context: &str,
) -> Result<Vec<Row>> {
    // Capped, so a very large limit does not allocate one huge fetch buffer; past the cap the
    // last fetch may lock up to that many rows more, held only until the short transaction ends.
    let size = max_rows.clamp(1, MAX_FETCH_ARRAY);
    let mut statement =
        connection.statement(sql).fetch_array_size(size).prefetch_rows(size).build().context(context)?;
    let rows = statement.query_named(binds).context(context)?;
    let wanted = usize::try_from(max_rows).unwrap_or(usize::MAX);
    rows.take(wanted).map(|row| row.context(context)).collect()
}

/// Runs `each` once per chunk of `ids` (at most [`MAX_IDS`]) with `template`'s `{ids}` filled in
/// and the binds of `first` followed by the chunk's ids.
fn over_ids<R>(
    template: &str,
    first: &[Bind<'_>],
    ids: &[Vec<u8>],
    mut each: impl FnMut(&str, &[Bind<'_>]) -> Result<R>,
) -> Result<Vec<R>> {
    ids.chunks(MAX_IDS)
        .map(|chunk| {
            let names = id_names(chunk.len());
            let mut binds = first.to_vec();
            binds.extend(names.iter().map(String::as_str).zip(chunk.iter().map(|id| id as &dyn ToSql)));
            each(&with_ids(template, chunk.len()), &binds)
        })
        .collect()
}

/// Runs `template` (with `{ids}`) once per chunk of `ids`, adding up the rows changed.
pub(crate) fn execute_over_ids(
    connection: &Connection,
    template: &str,
    first: &[Bind<'_>],
    ids: &[Vec<u8>],
    context: &str,
) -> Result<u64> {
    let changed = over_ids(template, first, ids, |sql, binds| execute(connection, sql, binds, context))?;
    Ok(changed.into_iter().sum())
}

/// Runs the query `template` (with `{ids}`) once per chunk of `ids`, collecting the rows.
pub(crate) fn query_over_ids(
    connection: &Connection,
    template: &str,
    first: &[Bind<'_>],
    ids: &[Vec<u8>],
    context: &str,
) -> Result<Vec<Row>> {
    let rows = over_ids(template, first, ids, |sql, binds| query(connection, sql, binds, context))?;
    Ok(rows.into_iter().flatten().collect())
}

/// The ids of the rows a locking cursor (see [`lock`]) fetched: column `id`, as stored.
pub(crate) fn lock_ids(
    connection: &Connection,
    sql: &str,
    binds: &[Bind<'_>],
    max_rows: u32,
    context: &str,
) -> Result<Vec<Vec<u8>>> {
    lock(connection, sql, binds, max_rows, context)?
        .iter()
        .map(|row| row.get::<_, Vec<u8>>("ID").context(context))
        .collect()
}

/// What every DAO holds: the bounded runner and the statements for its tables.
#[derive(Clone)]
pub(crate) struct Store {
    pub(crate) db: Db,
    pub(crate) statements: Arc<Statements>,
}

impl Store {
    /// Runs `work` as one transaction on a blocking thread, handing it the statements and the
    /// context (what is being done, for errors).
    pub(crate) async fn call<T, F>(&self, context: impl Into<String>, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Statements, &str) -> Result<T> + Send + 'static,
    {
        let statements = Arc::clone(&self.statements);
        let context = context.into();
        self.db
            .run(&context.clone(), move |connection| {
                transaction(connection, &context, |connection| work(connection, &statements, &context))
            })
            .await
    }

    /// Deletes up to `max_rows` rows older than `older_than` with the statement `pick` chooses
    /// (the clean-ups: its binds are `:older_than_micros` and `:max_rows`).
    pub(crate) async fn delete_aged(
        &self,
        pick: fn(&Statements) -> &str,
        older_than: Duration,
        max_rows: u32,
        context: &'static str,
    ) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        self.call(context, move |connection, statements, context| {
            let (older, limit) = (micros(older_than), rows(max_rows));
            let binds: [Bind<'_>; 2] = [("older_than_micros", &older), ("max_rows", &limit)];
            execute(connection, pick(statements), &binds, context)
        })
        .await
    }
}

/// Declares the DAO types over a [`Store`], each shown by `Debug` with its table.
macro_rules! store_daos {
    ($($(#[$doc:meta])* $dao:ident: $table:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $dao(pub(crate) crate::session::Store);

        impl std::fmt::Debug for $dao {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($dao)).field("table", &self.0.statements.tables.$table()).finish()
            }
        }
    )*};
}
pub(crate) use store_daos;

/// A span in whole microseconds, as the statements bind it (saturating).
pub(crate) fn micros(span: Duration) -> i64 {
    i64::try_from(span.as_micros()).unwrap_or(i64::MAX)
}

/// A row limit as bound.
pub(crate) fn rows(max_rows: u32) -> i64 {
    i64::from(max_rows)
}
