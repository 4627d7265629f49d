//! The write side: [`OraTransaction`], a caller's transaction on a pooled connection, and
//! [`OraWriter`], which publishes and records inside it.

use std::sync::Arc;

use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
use oracle::Connection;
use oracle::sql_type::OracleType;
use uuid::Uuid;

use crate::blocking::Held;
use crate::error::OraResultExt;
use crate::inbox::{record_many_on, record_on};
use crate::row::{headers_to_text, id_bytes};
use crate::statements::Statements;

/// A transaction of the caller's on one pooled connection, begun by
/// [`OraDialect::begin`](crate::OraDialect::begin).
///
/// The `oracle` crate blocks, so the business statements run through [`run`](Self::run), on a
/// blocking thread; [`OraWriter`] publishes and records in the same transaction. Nothing is
/// committed until [`commit`](Self::commit); a transaction dropped without `commit` or
/// [`rollback`](Self::rollback) is rolled back before its connection goes back to the pool.
pub struct OraTransaction {
    held: Option<Held<Connection>>,
}

impl std::fmt::Debug for OraTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OraTransaction").field("open", &self.held.is_some()).finish()
    }
}

impl OraTransaction {
    pub(crate) fn new(held: Held<Connection>) -> Self {
        Self { held: Some(held) }
    }

    /// The held connection, or an error once the transaction has ended.
    pub(crate) fn held(&self) -> Result<&Held<Connection>> {
        self.held
            .as_ref()
            .ok_or_else(|| oncebox_core::Error::invalid_input("the Oracle transaction has ended"))
    }

    /// Runs `work` on the transaction's connection, on a blocking thread: the caller's own
    /// statements, in this transaction.
    ///
    /// ```no_run
    /// # async fn example(tx: &oncebox_oracle::OraTransaction) -> oncebox_core::Result<()> {
    /// tx.run(|connection| {
    ///     connection.execute("INSERT INTO orders (id, total) VALUES (:1, :2)", &[&42, &1999])?;
    ///     Ok(())
    /// })
    /// .await
    /// # }
    /// ```
    pub async fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> oracle::Result<T> + Send + 'static,
    {
        let context = "running the caller's statements";
        self.held()?.run(context, move |connection| work(connection).context(context)).await
    }

    /// Commits, and gives the connection back to the pool.
    pub async fn commit(self) -> Result<()> {
        self.end("committing", Connection::commit).await
    }

    /// Rolls back, and gives the connection back to the pool.
    pub async fn rollback(self) -> Result<()> {
        self.end("rolling back", Connection::rollback).await
    }

    async fn end(mut self, context: &'static str, how: fn(&Connection) -> oracle::Result<()>) -> Result<()> {
        match self.held.take() {
            Some(held) => held.run(context, move |connection| how(connection).context(context)).await,
            None => Ok(()),
        }
    }
}

impl Drop for OraTransaction {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        // The rollback blocks; on a runtime it runs on a blocking thread, which also keeps the
        // permit until the connection is clean.
        let roll_back = move || {
            if let Err(error) = held.connection.rollback() {
                tracing::warn!(%error, "rolling back a dropped Oracle transaction failed");
            }
            drop(held);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(roll_back)),
            Err(_) => roll_back(),
        }
    }
}

/// Writes outbox rows and inbox records inside an [`OraTransaction`].
#[derive(Clone)]
pub struct OraWriter {
    pub(crate) statements: Arc<Statements>,
}

impl std::fmt::Debug for OraWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OraWriter").field("table", &self.statements.tables.events()).finish()
    }
}

/// An event as bound: id, type, payload, payload type, headers text, partition key. Empty text
/// is bound as NULL, which is what Oracle stores for `''` anyway (and an empty CLOB write is
/// refused by OCI).
type EventRow = (Vec<u8>, String, Option<String>, Option<String>, String, Option<String>);

/// Text as bound: `None` for the empty text.
fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

impl OraWriter {
    fn rows(events: &[NewOutboxEvent]) -> Result<Vec<EventRow>> {
        events
            .iter()
            .map(|event| {
                Ok((
                    id_bytes(event.id),
                    event.event_type.clone(),
                    non_empty(&event.payload),
                    non_empty(&event.payload_type),
                    headers_to_text(&event.headers)?,
                    event.partition_key.clone(),
                ))
            })
            .collect()
    }
}

/// Inserts `rows` with one array-bound execution. Each payload and headers value travels as a
/// temporary LOB of its own, so a large batch costs more than one round trip.
fn insert_events(statements: &Statements, connection: &Connection, rows: &[EventRow]) -> Result<()> {
    let context = "writing outbox events";
    let mut insert = connection.batch(&statements.insert_events, rows.len()).build().context(context)?;
    // CLOB binds take text of any length; a VARCHAR2 bind would stop at 32,767 bytes.
    insert.set_type("payload", &OracleType::CLOB).context(context)?;
    insert.set_type("headers", &OracleType::CLOB).context(context)?;
    for (id, event_type, payload, payload_type, headers, partition_key) in rows {
        insert
            .append_row_named(&[
                ("id", id),
                ("event_type", event_type),
                ("payload", payload),
                ("payload_type", payload_type),
                ("headers", headers),
                ("partition_key", partition_key),
            ])
            .context(context)?;
    }
    insert.execute().context(context)
}

impl<'t> OutboxWriter<&'t mut OraTransaction> for OraWriter {
    async fn write(&self, tx: &'t mut OraTransaction, events: &[NewOutboxEvent]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let rows = Self::rows(events)?;
        let statements = Arc::clone(&self.statements);
        tx.held()?
            .run("writing outbox events", move |connection| insert_events(&statements, connection, &rows))
            .await
    }
}

impl InboxWriter<OraTransaction> for OraWriter {
    async fn record(&self, tx: &mut OraTransaction, consumer: &str, id: Uuid) -> Result<bool> {
        let statements = Arc::clone(&self.statements);
        let consumer = consumer.to_owned();
        tx.held()?
            .run("recording a consumed event", move |connection| {
                record_on(&statements, connection, &consumer, id)
            })
            .await
    }

    async fn record_many(&self, tx: &mut OraTransaction, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let statements = Arc::clone(&self.statements);
        let consumer = consumer.to_owned();
        let ids = ids.to_vec();
        tx.held()?
            .run("recording consumed events", move |connection| {
                record_many_on(&statements, connection, &consumer, &ids)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_bound_as_null() {
        assert_eq!(non_empty(""), None);
        assert_eq!(non_empty("{}"), Some("{}".to_owned()));
    }
}
