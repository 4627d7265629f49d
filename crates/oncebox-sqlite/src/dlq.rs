//! The relay's and the DLQ API's access to the dead letter queue table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::{DlqCounts, DlqFilter, DlqSelection};
use oncebox_core::{DlqDao, DlqEvent, DlqStatus, Error, OutboxEvent, Result};
use oncebox_sqlx::{DecodeRow, count, status_counts};
use sqlx::SqlitePool;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::row::SqliteRowFormat;
use crate::statements::Statements;
use crate::time::earlier_by;

/// [`DlqDao`] for SQLite. Both transfers run in one `BEGIN IMMEDIATE` transaction each, so a row
/// is in exactly one of the two tables at every commit.
#[derive(Clone)]
pub struct SqliteDlqDao {
    pool: SqlitePool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for SqliteDlqDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDlqDao").field("table", &self.statements.tables.dlq()).finish()
    }
}

impl SqliteDlqDao {
    pub(crate) fn new(pool: SqlitePool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.dlq()
    }
}

fn limit_value(limit: u32) -> i64 {
    i64::from(limit)
}

#[async_trait]
impl DlqDao for SqliteDlqDao {
    async fn transfer_to_dlq(&self, limit: u32) -> Result<Vec<OutboxEvent>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let context = "moving failed events to the DLQ";
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.context(context)?;
        let rows = sqlx::query(self.statements.dlq_insert_failed.clone())
            .bind(limit_value(limit))
            .fetch_all(&mut *tx)
            .await
            .context(context)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // A row that cannot be decoded moves like the others (it failed for that reason); only
        // the list handed back, for the DLQ handler, lacks it.
        let decoded = SqliteRowFormat::decode_events(&rows, self.table())?;
        decoded.warn_left_out("a dead letter queue row");
        // Deleted by the id as stored, so a row whose id is not a UUID leaves the outbox too.
        let ids: Vec<String> = decoded
            .ids()
            .map(|id| id.hyphenated().to_string())
            .chain(decoded.malformed_ids.iter().map(|(stored_id, _)| stored_id.clone()))
            .collect();
        let mut moved = decoded.rows;
        sqlx::query(self.statements.delete_events_by_ids.clone())
            .bind(serde_json::to_string(&ids)?)
            .execute(&mut *tx)
            .await
            .context(context)?;
        tx.commit().await.context(context)?;
        moved.sort_by_key(|event| (event.updated_at, event.id));
        Ok(moved)
    }

    async fn transfer_from_dlq(&self, limit: u32) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let context = "moving DLQ events back to the outbox";
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.context(context)?;
        let marked = sqlx::query(self.statements.dlq_mark_in_process.clone())
            .bind(limit_value(limit))
            .execute(&mut *tx)
            .await
            .context(context)?
            .rows_affected();
        if marked == 0 {
            return Ok(0);
        }
        sqlx::query(self.statements.events_insert_from_dlq.clone())
            .execute(&mut *tx)
            .await
            .context(context)?;
        let moved = sqlx::query(self.statements.dlq_delete_in_process.clone())
            .execute(&mut *tx)
            .await
            .context(context)?
            .rows_affected();
        tx.commit().await.context(context)?;
        Ok(moved)
    }

    async fn delete_resolved(&self, older_than: Duration, limit: u32) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.dlq_delete_resolved.clone())
            .bind(earlier_by(older_than))
            .bind(limit_value(limit))
            .execute(&self.pool)
            .await
            .context("deleting resolved DLQ events")?;
        Ok(result.rows_affected())
    }

    async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>> {
        let row = sqlx::query(self.statements.dlq_get.clone())
            .bind(id.hyphenated())
            .fetch_optional(&self.pool)
            .await
            .context("reading a DLQ event")?;
        row.map(|row| SqliteRowFormat::decode_dlq_event(&row, self.table())).transpose()
    }

    async fn list(&self, filter: &DlqFilter, offset: u64, limit: u32) -> Result<Vec<DlqEvent>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.statements.dlq_list.clone())
            .bind(filter.status.map(DlqStatus::as_str))
            .bind(filter.event_type.as_deref())
            .bind(limit_value(limit))
            .bind(i64::try_from(offset).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .context("listing DLQ events")?;
        let decoded = SqliteRowFormat::decode_dlq_events(&rows, self.table())?;
        decoded.warn_left_out("a dead letter queue row");
        Ok(decoded.rows)
    }

    async fn count(&self, filter: &DlqFilter) -> Result<u64> {
        let (rows,): (i64,) = sqlx::query_as(self.statements.dlq_count.clone())
            .bind(filter.status.map(DlqStatus::as_str))
            .bind(filter.event_type.as_deref())
            .fetch_one(&self.pool)
            .await
            .context("counting DLQ events")?;
        Ok(count(rows))
    }

    async fn set_status(&self, selection: &DlqSelection, status: DlqStatus) -> Result<u64> {
        if !status.is_settable() {
            return Err(Error::invalid_input(format!(
                "DLQ status {status} cannot be set; use MOVED, RESOLVED or TO_RETRY"
            )));
        }
        let context = "changing the status of DLQ events";
        let query = match selection {
            DlqSelection::Ids(ids) if ids.is_empty() => return Ok(0),
            DlqSelection::Ids(ids) => sqlx::query(self.statements.dlq_set_status_by_ids.clone())
                .bind(status.as_str())
                .bind(serde_json::to_string(ids)?),
            DlqSelection::EventType(event_type) => {
                sqlx::query(self.statements.dlq_set_status_by_type.clone())
                    .bind(status.as_str())
                    .bind(event_type.as_str())
            }
        };
        Ok(query.execute(&self.pool).await.context(context)?.rows_affected())
    }

    async fn delete(&self, selection: &DlqSelection) -> Result<u64> {
        let query = match selection {
            DlqSelection::Ids(ids) if ids.is_empty() => return Ok(0),
            DlqSelection::Ids(ids) => {
                sqlx::query(self.statements.dlq_delete_by_ids.clone()).bind(serde_json::to_string(ids)?)
            }
            DlqSelection::EventType(event_type) => {
                sqlx::query(self.statements.dlq_delete_by_type.clone()).bind(event_type.as_str())
            }
        };
        Ok(query.execute(&self.pool).await.context("deleting DLQ events")?.rows_affected())
    }

    async fn counts(&self) -> Result<DlqCounts> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(self.statements.dlq_counts.clone())
            .fetch_all(&self.pool)
            .await
            .context("counting DLQ events")?;
        Ok(DlqCounts { by_type_and_status: status_counts(rows, self.table(), "dlq_status")? })
    }
}
