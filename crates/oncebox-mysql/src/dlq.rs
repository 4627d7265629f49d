//! The relay's and the DLQ API's access to the dead letter queue table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::{DlqCounts, DlqFilter, DlqSelection};
use oncebox_core::{DlqDao, DlqEvent, DlqStatus, Error, OutboxEvent, Result};
use oncebox_sqlx::{DecodeRow, count, status_counts};
use sqlx::{MySqlPool, Row};
use uuid::Uuid;

use crate::error::{SqlxResultExt, database_error};
use crate::ids::bind_ids;
use crate::row::MySqlRowFormat;
use crate::statements::{MAX_IDS_PER_STATEMENT, Statements, Template, id_slots};
use crate::time::{limit, micros};

/// [`DlqDao`] for MySQL and MariaDB. Each transfer is one transaction: the source rows are locked
/// with `FOR UPDATE SKIP LOCKED`, copied with `REPLACE INTO … SELECT` and deleted, so a row is in
/// exactly one of the two tables at every commit and concurrent transfers never take the same row.
#[derive(Clone)]
pub struct MySqlDlqDao {
    pool: MySqlPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for MySqlDlqDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlDlqDao").field("table", &self.statements.tables.dlq()).finish()
    }
}

/// Runs `template` over `ids`, chunked, inside `tx`; returns the rows affected.
async fn execute_over_ids(
    tx: &mut sqlx::MySqlConnection,
    template: &Template,
    ids: &[Uuid],
    context: &str,
) -> Result<u64> {
    let mut affected = 0;
    for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
        let query = bind_ids(sqlx::query(template.with_ids(id_slots(chunk.len()))), chunk);
        affected += query.execute(&mut *tx).await.context(context)?.rows_affected();
    }
    Ok(affected)
}

impl MySqlDlqDao {
    pub(crate) fn new(pool: MySqlPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.dlq()
    }

    /// Runs `template` with `first` bound before the ids of `selection`, or `by_type` for an event
    /// type, outside any transaction.
    async fn by_selection(
        &self,
        selection: &DlqSelection,
        by_ids: &Template,
        by_type: &sqlx::SqlStr,
        first: Option<&str>,
        context: &str,
    ) -> Result<u64> {
        match selection {
            DlqSelection::Ids(ids) => {
                let mut affected = 0;
                for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
                    let mut query = sqlx::query(by_ids.with_ids(id_slots(chunk.len())));
                    if let Some(first) = first {
                        query = query.bind(first.to_owned());
                    }
                    let query = bind_ids(query, chunk);
                    affected += query.execute(&self.pool).await.context(context)?.rows_affected();
                }
                Ok(affected)
            }
            DlqSelection::EventType(event_type) => {
                let mut query = sqlx::query(by_type.clone());
                if let Some(first) = first {
                    query = query.bind(first.to_owned());
                }
                let query = query.bind(event_type.as_str());
                Ok(query.execute(&self.pool).await.context(context)?.rows_affected())
            }
        }
    }
}

#[async_trait]
impl DlqDao for MySqlDlqDao {
    async fn transfer_to_dlq(&self, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let context = "moving failed events to the DLQ";
        let mut tx = self.pool.begin().await.context(context)?;
        let rows = sqlx::query(self.statements.dlq_lock_failed.clone())
            .bind(limit(max_rows))
            .fetch_all(&mut *tx)
            .await
            .context(context)?;
        if rows.is_empty() {
            tx.commit().await.context(context)?;
            return Ok(Vec::new());
        }
        // A row that cannot be decoded moves like the others (it failed for that reason); only
        // the list handed back, for the DLQ handler, lacks it.
        let decoded = MySqlRowFormat::decode_events(&rows, self.statements.tables.events())?;
        decoded.warn_left_out("a dead letter queue row");
        let ids: Vec<Uuid> = decoded.ids().collect();
        let moved = decoded.rows;
        execute_over_ids(&mut tx, &self.statements.dlq_copy_failed, &ids, context).await?;
        execute_over_ids(&mut tx, &self.statements.delete_events_by_ids, &ids, context).await?;
        tx.commit().await.context(context)?;
        Ok(moved)
    }

    async fn transfer_from_dlq(&self, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let context = "moving DLQ events back to the outbox";
        let mut tx = self.pool.begin().await.context(context)?;
        let rows = sqlx::query(self.statements.dlq_lock_to_retry.clone())
            .bind(limit(max_rows))
            .fetch_all(&mut *tx)
            .await
            .context(context)?;
        let ids = rows
            .iter()
            .map(|row| row.try_get::<Uuid, _>("id").map_err(|error| database_error(context, error)))
            .collect::<Result<Vec<_>>>()?;
        if ids.is_empty() {
            tx.commit().await.context(context)?;
            return Ok(0);
        }
        execute_over_ids(&mut tx, &self.statements.events_insert_from_dlq, &ids, context).await?;
        let moved = execute_over_ids(&mut tx, &self.statements.dlq_delete_by_ids, &ids, context).await?;
        tx.commit().await.context(context)?;
        Ok(moved)
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
        row.map(|row| MySqlRowFormat::decode_dlq_event(&row, self.table())).transpose()
    }

    async fn list(&self, filter: &DlqFilter, offset: u64, max_rows: u32) -> Result<Vec<DlqEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let status = filter.status.map(DlqStatus::as_str);
        let event_type = filter.event_type.as_deref();
        let rows = sqlx::query(self.statements.dlq_list.clone())
            .bind(status)
            .bind(status)
            .bind(event_type)
            .bind(event_type)
            .bind(limit(max_rows))
            .bind(offset)
            .fetch_all(&self.pool)
            .await
            .context("listing DLQ events")?;
        let decoded = MySqlRowFormat::decode_dlq_events(&rows, self.table())?;
        decoded.warn_left_out("a dead letter queue row");
        Ok(decoded.rows)
    }

    async fn count(&self, filter: &DlqFilter) -> Result<u64> {
        let status = filter.status.map(DlqStatus::as_str);
        let event_type = filter.event_type.as_deref();
        let (rows,): (i64,) = sqlx::query_as(self.statements.dlq_count.clone())
            .bind(status)
            .bind(status)
            .bind(event_type)
            .bind(event_type)
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
        self.by_selection(
            selection,
            &self.statements.dlq_set_status_by_ids,
            &self.statements.dlq_set_status_by_type,
            Some(status.as_str()),
            "changing the status of DLQ events",
        )
        .await
    }

    async fn delete(&self, selection: &DlqSelection) -> Result<u64> {
        self.by_selection(
            selection,
            &self.statements.dlq_delete_by_ids,
            &self.statements.dlq_delete_by_type,
            None,
            "deleting DLQ events",
        )
        .await
    }

    async fn counts(&self) -> Result<DlqCounts> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(self.statements.dlq_counts.clone())
            .fetch_all(&self.pool)
            .await
            .context("counting DLQ events")?;
        Ok(DlqCounts { by_type_and_status: status_counts(rows, self.table(), "dlq_status")? })
    }
}
