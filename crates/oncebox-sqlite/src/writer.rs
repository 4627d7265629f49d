//! The write side: outbox rows and inbox records inside the caller's open sqlx transaction.

use std::sync::Arc;

use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
use oncebox_sqlx::Queries;
use sqlx::{Sqlite, Transaction};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::queries::{INSERT_EVENT_BINDS, SqliteQueries};

/// SQLite's default limit on bound parameters in one statement (`SQLITE_MAX_VARIABLE_NUMBER`).
const MAX_BINDS: usize = 32_766;
/// Rows per multi-row insert: as many as the parameter limit allows.
const ROWS_PER_INSERT: usize = MAX_BINDS / INSERT_EVENT_BINDS;
/// Inserts up to this many rows keep their prepared statement cached: small batch sizes repeat,
/// while a huge one-off statement would only crowd the cache.
const CACHED_INSERT_ROWS: usize = 64;

/// Writes outbox rows and inbox records into a caller's `sqlx::Transaction<'_, Sqlite>`. It never
/// begins or commits: the rows become visible when the caller commits, and vanish on rollback.
///
/// Obtained from [`SqliteDialect::writer`](oncebox_core::Dialect::writer); cheap to clone.
#[derive(Clone)]
pub struct SqliteWriter {
    statements: Arc<SqliteQueries>,
}

impl std::fmt::Debug for SqliteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteWriter").field("tables", self.statements.tables()).finish()
    }
}

impl SqliteWriter {
    pub(crate) fn new(statements: Arc<SqliteQueries>) -> Self {
        Self { statements }
    }
}

impl<'t, 'c> OutboxWriter<&'t mut Transaction<'c, Sqlite>> for SqliteWriter {
    /// Inserts `events` as PENDING rows due now, in one multi-row INSERT (several only when the
    /// batch exceeds SQLite's parameter limit).
    async fn write(&self, tx: &'t mut Transaction<'c, Sqlite>, events: &[NewOutboxEvent]) -> Result<()> {
        for chunk in events.chunks(ROWS_PER_INSERT) {
            let mut query = sqlx::query(self.statements.insert_events(chunk.len()))
                .persistent(chunk.len() <= CACHED_INSERT_ROWS);
            for event in chunk {
                query = query
                    .bind(event.id.hyphenated())
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

impl<'c> InboxWriter<Transaction<'c, Sqlite>> for SqliteWriter {
    async fn record(&self, tx: &mut Transaction<'c, Sqlite>, consumer: &str, id: Uuid) -> Result<bool> {
        self.statements.record_on(tx, consumer, id).await
    }

    async fn record_many(
        &self,
        tx: &mut Transaction<'c, Sqlite>,
        consumer: &str,
        ids: &[Uuid],
    ) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.statements.record_many_on(tx, consumer, ids).await
    }
}
