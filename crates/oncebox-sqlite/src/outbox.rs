//! The relay's access to the outbox table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{ClaimedBatch, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use oncebox_sqlx::{DecodeRow, status_counts};
use sqlx::SqlitePool;
use tracing::warn;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::row::SqliteRowFormat;
use crate::statements::Statements;
use crate::time::{earlier_by, later_by};

/// `last_error` keeps at most this many characters of a failure text.
/// [`OutboxDao`] for SQLite. Claims run in `BEGIN IMMEDIATE` transactions: SQLite has one writer at
/// a time, so a claim holds the write lock from its first read and no two claimers see the same row.
#[derive(Clone)]
pub struct SqliteOutboxDao {
    pool: SqlitePool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for SqliteOutboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteOutboxDao").field("table", &self.statements.tables.events()).finish()
    }
}

impl SqliteOutboxDao {
    pub(crate) fn new(pool: SqlitePool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.events()
    }
}

#[async_trait]
impl OutboxDao for SqliteOutboxDao {
    async fn claim(&self, event_type: &str, limit: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = ClaimedBatch { event_type: event_type.to_owned(), claim_token, events: Vec::new() };
        if limit == 0 {
            return Ok(batch);
        }
        let context = format!("claiming {event_type}");
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.context(&context)?;
        let rows = sqlx::query(self.statements.claim.clone())
            .bind(claim_token.hyphenated())
            .bind(event_type)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .context(&context)?;
        // Each row on its own: one that cannot be read is given up on in the claim's transaction,
        // and the others are sent.
        let decoded = SqliteRowFormat::decode_events(&rows, self.table())?;
        // A row whose id is not a UUID is addressed by the id as stored.
        let failures = decoded
            .undecodable_failures()
            .into_iter()
            .map(|(id, error)| (id.hyphenated().to_string(), error))
            .chain(decoded.malformed_id_failures());
        for (id, error) in failures {
            warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
            sqlx::query(self.statements.fail_undecodable.clone())
                .bind(id)
                .bind(claim_token.hyphenated())
                .bind(error)
                .execute(&mut *tx)
                .await
                .context(&context)?;
        }
        tx.commit().await.context(&context)?;
        let mut events = decoded.rows;
        // RETURNING gives no order guarantee.
        events.sort_by_key(|event| (event.next_retry_at, event.id));
        batch.events = events;
        Ok(batch)
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let context = format!("settling a batch of {}", batch.event_type);
        let token = batch.claim_token.hyphenated();
        let processed: Vec<Uuid> = settlements
            .iter()
            .filter_map(|settlement| match settlement {
                Settlement::Processed { id } => Some(*id),
                _ => None,
            })
            .collect();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.context(&context)?;
        let mut settled = 0;
        if !processed.is_empty() {
            settled += sqlx::query(self.statements.settle_processed.clone())
                .bind(token)
                .bind(serde_json::to_string(&processed)?)
                .execute(&mut *tx)
                .await
                .context(&context)?
                .rows_affected();
        }
        for settlement in settlements {
            let query = match settlement {
                Settlement::Processed { .. } => continue,
                Settlement::Retry { id, delay, error } => sqlx::query(self.statements.settle_retry.clone())
                    .bind(id.hyphenated())
                    .bind(token)
                    .bind(later_by(*delay))
                    .bind(last_error_text(error).to_owned()),
                Settlement::Failed { id, error } => sqlx::query(self.statements.settle_failed.clone())
                    .bind(id.hyphenated())
                    .bind(token)
                    .bind(last_error_text(error).to_owned()),
            };
            settled += query.execute(&mut *tx).await.context(&context)?.rows_affected();
        }
        tx.commit().await.context(&context)?;
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, limit: u32) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.recover_stuck.clone())
            .bind(earlier_by(older_than))
            .bind(i64::from(limit))
            .bind(i64::from(max_recoveries))
            .execute(&self.pool)
            .await
            .context("recovering stuck events")?;
        Ok(result.rows_affected())
    }

    async fn delete_processed(&self, older_than: Duration, limit: u32) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.delete_processed.clone())
            .bind(earlier_by(older_than))
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await
            .context("deleting processed events")?;
        Ok(result.rows_affected())
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(self.statements.get_event.clone())
            .bind(id.hyphenated())
            .fetch_optional(&self.pool)
            .await
            .context("reading an outbox event")?;
        row.map(|row| SqliteRowFormat::decode_event(&row, self.table())).transpose()
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(self.statements.count_events.clone())
            .fetch_all(&self.pool)
            .await
            .context("counting outbox events")?;
        Ok(OutboxCounts { by_type_and_status: status_counts(rows, self.table(), "status")? })
    }
}
