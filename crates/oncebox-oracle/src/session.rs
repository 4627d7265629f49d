//! The connection side: the pool behind the bounded blocking runner, one transaction per DAO
//! call, and the few ways a statement is run (named binds only, id lists split at
//! [`MAX_IDS`](crate::statements::MAX_IDS), locking cursors that fetch only what they may lock).

use std::time::Duration;

use oncebox_core::Result;
use oracle::sql_type::ToSql;
use oracle::{Connection, Row};

use crate::blocking::{Bounded, Source};
use crate::error::OraResultExt;
use crate::statements::{MAX_IDS, id_names, with_ids};

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
    let size = max_rows.max(1);
    let mut statement =
        connection.statement(sql).fetch_array_size(size).prefetch_rows(size).build().context(context)?;
    let rows = statement.query_named(binds).context(context)?;
    let wanted = usize::try_from(max_rows).unwrap_or(usize::MAX);
    rows.take(wanted).map(|row| row.context(context)).collect()
}

/// The binds of `first` followed by an id list.
fn with_id_binds<'a>(first: &[Bind<'a>], names: &'a [String], ids: &'a [Vec<u8>]) -> Vec<Bind<'a>> {
    let mut binds = first.to_vec();
    binds.extend(names.iter().map(String::as_str).zip(ids.iter().map(|id| id as &dyn ToSql)));
    binds
}

/// Runs `template` (with `{ids}`) once per chunk of `ids`, adding up the rows changed.
pub(crate) fn execute_over_ids(
    connection: &Connection,
    template: &str,
    first: &[Bind<'_>],
    ids: &[Vec<u8>],
    context: &str,
) -> Result<u64> {
    let mut changed = 0;
    for chunk in ids.chunks(MAX_IDS) {
        let names = id_names(chunk.len());
        changed += execute(
            connection,
            &with_ids(template, chunk.len()),
            &with_id_binds(first, &names, chunk),
            context,
        )?;
    }
    Ok(changed)
}

/// Runs the query `template` (with `{ids}`) once per chunk of `ids`, collecting the rows.
pub(crate) fn query_over_ids(
    connection: &Connection,
    template: &str,
    first: &[Bind<'_>],
    ids: &[Vec<u8>],
    context: &str,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for chunk in ids.chunks(MAX_IDS) {
        let names = id_names(chunk.len());
        rows.extend(query(
            connection,
            &with_ids(template, chunk.len()),
            &with_id_binds(first, &names, chunk),
            context,
        )?);
    }
    Ok(rows)
}

/// A span in whole microseconds, as the statements bind it (saturating).
pub(crate) fn micros(span: Duration) -> i64 {
    i64::try_from(span.as_micros()).unwrap_or(i64::MAX)
}

/// A row limit as bound.
pub(crate) fn rows(max_rows: u32) -> i64 {
    i64::from(max_rows)
}
