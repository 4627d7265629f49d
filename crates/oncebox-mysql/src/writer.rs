//! The write side: outbox rows and inbox records inside the caller's open transaction.

use std::sync::Arc;

use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
use sqlx::{MySql, Transaction};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::queries::{INSERT_CHUNK_BYTES, INSERT_CHUNK_ROWS, MySqlQueries};
use oncebox_sqlx::Queries;

/// Writes outbox rows and inbox records into a caller's `sqlx::Transaction<'_, MySql>`. It never
/// begins or commits: the rows become visible when the caller commits, and vanish on rollback.
///
/// A batch is one multi-row `INSERT … VALUES (…), (…)` per chunk of at most 500 rows or 4 MiB of
/// payload, so a batch of any size stays under the server's placeholder and packet limits. The
/// insert is correct whatever isolation level the caller's transaction runs at: it takes only the
/// new rows' locks, and the relay's claims run at READ COMMITTED and so hold no gap locks that
/// could block it.
///
/// With the `mysql-async` feature it also writes into `&mut mysql_async::Transaction<'_>`, running
/// the very same SQL.
///
/// Obtained from [`MySqlDialect::writer`](oncebox_core::Dialect::writer); cheap to clone.
#[derive(Clone)]
pub struct MySqlWriter {
    statements: Arc<MySqlQueries>,
}

impl std::fmt::Debug for MySqlWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlWriter").field("tables", self.statements.tables()).finish()
    }
}

/// Splits `events` into runs of at most [`INSERT_CHUNK_ROWS`] rows and (unless a single event is
/// larger) [`INSERT_CHUNK_BYTES`] bytes of text.
pub(crate) fn insert_chunks(events: &[NewOutboxEvent]) -> Vec<&[NewOutboxEvent]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (index, event) in events.iter().enumerate() {
        let size = event.payload.len() + event.payload_type.len() + event.event_type.len() + 64;
        let full = index - start == INSERT_CHUNK_ROWS || (index > start && bytes + size > INSERT_CHUNK_BYTES);
        if full {
            chunks.push(&events[start..index]);
            start = index;
            bytes = 0;
        }
        bytes += size;
    }
    if start < events.len() {
        chunks.push(&events[start..]);
    }
    chunks
}

impl MySqlWriter {
    pub(crate) fn new(statements: Arc<MySqlQueries>) -> Self {
        Self { statements }
    }
}

impl<'t, 'c> OutboxWriter<&'t mut Transaction<'c, MySql>> for MySqlWriter {
    /// Inserts `events` as PENDING rows due now, one statement per chunk.
    async fn write(&self, tx: &'t mut Transaction<'c, MySql>, events: &[NewOutboxEvent]) -> Result<()> {
        for chunk in insert_chunks(events) {
            let mut query = sqlx::query(self.statements.insert_events.with_rows(chunk.len()));
            for event in chunk {
                query = query
                    .bind(event.id)
                    .bind(event.event_type.as_str())
                    .bind(event.payload.as_str())
                    .bind(event.payload_type.as_str())
                    .bind(event.headers_json())
                    .bind(event.partition_key.as_deref());
            }
            query.execute(&mut **tx).await.context("writing outbox events")?;
        }
        Ok(())
    }
}

impl<'c> InboxWriter<Transaction<'c, MySql>> for MySqlWriter {
    async fn record(&self, tx: &mut Transaction<'c, MySql>, consumer: &str, id: Uuid) -> Result<bool> {
        self.statements.record_on(tx, consumer, id).await
    }

    async fn record_many(
        &self,
        tx: &mut Transaction<'c, MySql>,
        consumer: &str,
        ids: &[Uuid],
    ) -> Result<Vec<Uuid>> {
        self.statements.record_many_on(tx, consumer, ids).await
    }
}

/// The same statements for mysql_async: the SQL text is the sqlx writer's, so both produce
/// identical rows.
#[cfg(feature = "mysql-async")]
mod mysql_async_writer {

    use mysql_async::prelude::Queryable;
    use mysql_async::{Params, Transaction, Value};
    use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
    use uuid::Uuid;

    use super::{MySqlWriter, insert_chunks};
    use crate::error::{DUPLICATE_KEY, mysql_async_error};

    fn text(value: &str) -> Value {
        Value::Bytes(value.as_bytes().to_vec())
    }

    fn id(value: Uuid) -> Value {
        Value::Bytes(value.as_bytes().to_vec())
    }

    impl<'t, 'c> OutboxWriter<&'t mut Transaction<'c>> for MySqlWriter {
        /// Inserts `events` as PENDING rows due now, one statement per chunk.
        async fn write(&self, tx: &'t mut Transaction<'c>, events: &[NewOutboxEvent]) -> Result<()> {
            for chunk in insert_chunks(events) {
                let mut values = Vec::with_capacity(chunk.len() * 6);
                for event in chunk {
                    values.push(id(event.id));
                    values.push(text(&event.event_type));
                    values.push(text(&event.payload));
                    values.push(text(&event.payload_type));
                    values.push(Value::Bytes(event.headers_json().into_bytes()));
                    values.push(event.partition_key.as_deref().map_or(Value::NULL, text));
                }
                let statement = self.statements.insert_events.with_rows(chunk.len());
                tx.exec_drop(statement.as_str(), Params::Positional(values))
                    .await
                    .map_err(|error| mysql_async_error("writing outbox events", error))?;
            }
            Ok(())
        }
    }

    /// Records one id; `true` when it was new.
    async fn record_one(
        writer: &MySqlWriter,
        tx: &mut Transaction<'_>,
        consumer: &str,
        event: Uuid,
    ) -> Result<bool> {
        let params = Params::Positional(vec![text(consumer), id(event)]);
        match tx.exec_drop(writer.statements.common.inbox_record.as_str(), params).await {
            Ok(()) => Ok(true),
            Err(mysql_async::Error::Server(server)) if server.code == DUPLICATE_KEY => Ok(false),
            Err(error) => Err(mysql_async_error("recording a consumed event", error)),
        }
    }

    impl<'c> InboxWriter<Transaction<'c>> for MySqlWriter {
        async fn record(&self, tx: &mut Transaction<'c>, consumer: &str, id: Uuid) -> Result<bool> {
            record_one(self, tx, consumer, id).await
        }

        async fn record_many(
            &self,
            tx: &mut Transaction<'c>,
            consumer: &str,
            ids: &[Uuid],
        ) -> Result<Vec<Uuid>> {
            let mut new = Vec::new();
            for id in oncebox_core::inbox::distinct(ids) {
                if record_one(self, tx, consumer, id).await? {
                    new.push(id);
                }
            }
            Ok(new)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload_len: usize) -> NewOutboxEvent {
        NewOutboxEvent {
            id: Uuid::now_v7(),
            event_type: "t".into(),
            payload: "x".repeat(payload_len),
            payload_type: "T".into(),
            headers: Default::default(),
            partition_key: None,
        }
    }

    #[test]
    fn batches_are_chunked_by_rows_and_bytes() {
        let many: Vec<_> = (0..1001).map(|_| event(10)).collect();
        let sizes: Vec<usize> = insert_chunks(&many).iter().map(|chunk| chunk.len()).collect();
        assert_eq!(sizes, vec![500, 500, 1]);
        let big: Vec<_> = (0..5).map(|_| event(3 * 1024 * 1024)).collect();
        let sizes: Vec<usize> = insert_chunks(&big).iter().map(|chunk| chunk.len()).collect();
        assert_eq!(sizes, vec![1, 1, 1, 1, 1], "each 3 MiB event gets its own statement");
        assert!(insert_chunks(&[]).is_empty());
    }
}
