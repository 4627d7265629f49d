//! The relay's and the DLQ API's access to the dead letter queue table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::{DlqCounts, DlqFilter, DlqSelection};
use oncebox_core::{DlqDao, DlqEvent, DlqStatus, Error, OutboxEvent, Result};
use oncebox_sqlx::{DecodeRow, count, status_counts};
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::row::PgRowFormat;
use crate::statements::Statements;
use crate::time::{limit, micros};

/// [`DlqDao`] for PostgreSQL. Each transfer is one statement whose CTEs lock the rows
/// (`FOR UPDATE SKIP LOCKED`), delete them from one table and insert them into the other, so a row
/// is in exactly one of the two tables at every commit and concurrent transfers never collide.
#[derive(Clone)]
pub struct PgDlqDao {
    pool: PgPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for PgDlqDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDlqDao").field("table", &self.statements.tables.dlq()).finish()
    }
}

impl PgDlqDao {
    pub(crate) fn new(pool: PgPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.dlq()
    }
}

#[async_trait]
impl DlqDao for PgDlqDao {
    async fn transfer_to_dlq(&self, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.statements.dlq_transfer_to.clone())
            .bind(limit(max_rows))
            .fetch_all(&self.pool)
            .await
            .context("moving failed events to the DLQ")?;
        // The rows have moved whatever they hold; one that cannot be decoded (it failed for that
        // reason) is only left out of the list handed back, for the DLQ handler.
        let decoded = PgRowFormat::decode_events(&rows, self.statements.tables.events())?;
        decoded.warn_left_out("a dead letter queue row");
        let mut moved = decoded.rows;
        moved.sort_by_key(|event| (event.updated_at, event.id));
        Ok(moved)
    }

    async fn transfer_from_dlq(&self, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.dlq_transfer_from.clone())
            .bind(limit(max_rows))
            .execute(&self.pool)
            .await
            .context("moving DLQ events back to the outbox")?;
        Ok(result.rows_affected())
    }

    async fn delete_resolved(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.dlq_delete_resolved.clone())
            .bind(micros(older_than))
            .bind(limit(max_rows))
            .execute(&self.pool)
            .await
            .context("deleting resolved DLQ events")?;
        Ok(result.rows_affected())
    }

    async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>> {
        let row = sqlx::query(self.statements.dlq_get.clone())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .context("reading a DLQ event")?;
        row.map(|row| PgRowFormat::decode_dlq_event(&row, self.table())).transpose()
    }

    async fn list(&self, filter: &DlqFilter, offset: u64, max_rows: u32) -> Result<Vec<DlqEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.statements.dlq_list.clone())
            .bind(filter.status.map(DlqStatus::as_str))
            .bind(filter.event_type.as_deref())
            .bind(limit(max_rows))
            .bind(i64::try_from(offset).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .context("listing DLQ events")?;
        let decoded = PgRowFormat::decode_dlq_events(&rows, self.table())?;
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
        let query = match selection {
            DlqSelection::Ids(ids) if ids.is_empty() => return Ok(0),
            DlqSelection::Ids(ids) => {
                sqlx::query(self.statements.dlq_set_status_by_ids.clone()).bind(status.as_str()).bind(ids)
            }
            DlqSelection::EventType(event_type) => {
                sqlx::query(self.statements.dlq_set_status_by_type.clone())
                    .bind(status.as_str())
                    .bind(event_type.as_str())
            }
        };
        Ok(query.execute(&self.pool).await.context("changing the status of DLQ events")?.rows_affected())
    }

    async fn delete(&self, selection: &DlqSelection) -> Result<u64> {
        let query = match selection {
            DlqSelection::Ids(ids) if ids.is_empty() => return Ok(0),
            DlqSelection::Ids(ids) => sqlx::query(self.statements.dlq_delete_by_ids.clone()).bind(ids),
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
