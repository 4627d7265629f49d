//! The relay's access to the outbox table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{ClaimedBatch, EventStatus, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use oncebox_sqlx::{DecodeRow, status_counts};
use sqlx::{MySqlConnection, MySqlPool, Row};
use tracing::warn;
use uuid::Uuid;

use crate::error::{SqlxResultExt, database_error};
use crate::ids::bind_ids;
use crate::row::MySqlRowFormat;
use crate::statements::{MAX_IDS_PER_STATEMENT, Statements, id_slots};
use crate::time::{limit, micros};

/// Retries and failures per settle statement (four placeholders each).
const OUTCOMES_PER_STATEMENT: usize = 1000;

/// [`OutboxDao`] for MySQL and MariaDB. There is no `UPDATE … RETURNING` and no
/// `UPDATE … WHERE id IN (SELECT … LIMIT n)`, so a claim is one short transaction of two
/// statements: `SELECT … FOR UPDATE SKIP LOCKED` on the claim index, then `UPDATE … WHERE id IN`.
/// Locks last only for that transaction, never while the broker is called. A settle is one
/// transaction too, fenced by the claim token, so a retried settle never sees half of an earlier
/// attempt.
#[derive(Clone)]
pub struct MySqlOutboxDao {
    pool: MySqlPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for MySqlOutboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlOutboxDao").field("table", &self.statements.tables.events()).finish()
    }
}

impl MySqlOutboxDao {
    pub(crate) fn new(pool: MySqlPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.events()
    }

    /// Runs every statement of a settle on `connection` (a transaction when there are several).
    async fn settle_all(
        &self,
        connection: &mut MySqlConnection,
        token: Uuid,
        processed: &[Uuid],
        others: &[&Settlement],
        context: &str,
    ) -> Result<u64> {
        let mut settled = 0;
        if !processed.is_empty() {
            settled += self.settle_processed(connection, token, processed, context).await?;
        }
        if !others.is_empty() {
            settled += self.settle_outcomes(connection, token, others, context).await?;
        }
        Ok(settled)
    }

    /// Settles the delivered events of a batch with one `UPDATE … WHERE id IN` per chunk, inside
    /// the settle's connection.
    async fn settle_processed(
        &self,
        tx: &mut MySqlConnection,
        token: Uuid,
        ids: &[Uuid],
        context: &str,
    ) -> Result<u64> {
        let mut settled = 0;
        for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
            let statement = self.statements.settle_processed.with_ids(id_slots(chunk.len()));
            let query = bind_ids(sqlx::query(statement).bind(token), chunk);
            settled += query.execute(&mut *tx).await.context(context)?.rows_affected();
        }
        Ok(settled)
    }

    /// Settles retries and failures with one joined `UPDATE` per chunk, on the settle's
    /// connection.
    async fn settle_outcomes(
        &self,
        tx: &mut MySqlConnection,
        token: Uuid,
        outcomes: &[&Settlement],
        context: &str,
    ) -> Result<u64> {
        let mut settled = 0;
        for chunk in outcomes.chunks(OUTCOMES_PER_STATEMENT) {
            let mut query = sqlx::query(self.statements.settle_outcomes.with_outcomes(chunk.len()));
            for settlement in chunk {
                let (status, delay, error) = match settlement {
                    Settlement::Processed { .. } => (EventStatus::Processed, 0, ""),
                    Settlement::Retry { delay, error, .. } => {
                        (EventStatus::Pending, micros(*delay), last_error_text(error))
                    }
                    Settlement::Failed { error, .. } => (EventStatus::Failed, 0, last_error_text(error)),
                };
                query = query.bind(settlement.id()).bind(status.as_str()).bind(delay).bind(error.to_owned());
            }
            settled += query.bind(token).execute(&mut *tx).await.context(context)?.rows_affected();
        }
        Ok(settled)
    }
}

#[async_trait]
impl OutboxDao for MySqlOutboxDao {
    async fn claim(&self, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = ClaimedBatch { event_type: event_type.to_owned(), claim_token, events: Vec::new() };
        if max_rows == 0 {
            return Ok(batch);
        }
        let context = format!("claiming {event_type}");
        let mut tx = self.pool.begin().await.context(&context)?;
        let rows = sqlx::query(self.statements.claim_select.clone())
            .bind(event_type)
            .bind(limit(max_rows))
            .fetch_all(&mut *tx)
            .await
            .context(&context)?;
        let Some(first) = rows.first() else {
            // Nothing locked; ending the transaction now returns the connection sooner.
            tx.commit().await.context(&context)?;
            return Ok(batch);
        };
        let claimed_at: DateTime<Utc> =
            first.try_get("claimed_at").map_err(|error| database_error(&context, error))?;
        // Each row on its own: one that cannot be read is claimed with the others and given up on
        // in the same transaction, and the others are sent.
        let decoded = MySqlRowFormat::decode_events(&rows, self.table())?;
        let ids: Vec<Uuid> = decoded.ids().collect();
        for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
            let statement = self.statements.claim_update.with_ids(id_slots(chunk.len()));
            let query = bind_ids(sqlx::query(statement).bind(claim_token).bind(claimed_at), chunk);
            query.execute(&mut *tx).await.context(&context)?;
        }
        for (id, error) in decoded.undecodable_failures() {
            warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
            sqlx::query(self.statements.fail_undecodable.clone())
                .bind(error)
                .bind(id)
                .bind(claim_token)
                .execute(&mut *tx)
                .await
                .context(&context)?;
        }
        tx.commit().await.context(&context)?;
        let mut events = decoded.rows;
        for event in &mut events {
            event.status = EventStatus::InProcess;
            event.claim_token = Some(claim_token);
            event.updated_at = claimed_at;
        }
        batch.events = events;
        Ok(batch)
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let context = format!("settling a batch of {}", batch.event_type);
        let mut processed = Vec::new();
        let mut others = Vec::new();
        for settlement in settlements {
            match settlement {
                Settlement::Processed { id } => processed.push(*id),
                _ => others.push(settlement),
            }
        }
        let statements =
            processed.len().div_ceil(MAX_IDS_PER_STATEMENT) + others.len().div_ceil(OUTCOMES_PER_STATEMENT);
        let settled = if statements == 1 {
            // The common case (every row delivered, one chunk) is one statement, atomic on its own:
            // no BEGIN and COMMIT round trips on the relay's hot path.
            let mut connection = self.pool.acquire().await.context(&context)?;
            self.settle_all(&mut connection, batch.claim_token, &processed, &others, &context).await?
        } else {
            // Several statements run in one transaction: when a later one fails, the engine
            // retries the whole settle, and it must find every row still under its token. Rows an
            // earlier, committed statement had already settled would match nothing and be counted
            // as refused, as if another worker had claimed them. The rows are the batch's own:
            // claims skip them (SKIP LOCKED) and no other batch's settle touches them, so only stuck
            // recovery can meet these short-held locks.
            let mut tx = self.pool.begin().await.context(&context)?;
            let settled = self.settle_all(&mut tx, batch.claim_token, &processed, &others, &context).await?;
            tx.commit().await.context(&context)?;
            settled
        };
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.recover_stuck.clone())
            .bind(max_recoveries)
            .bind(max_recoveries)
            .bind(micros(older_than))
            .bind(limit(max_rows))
            .execute(&self.pool)
            .await
            .context("recovering stuck events")?;
        Ok(result.rows_affected())
    }

    async fn delete_processed(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.delete_processed.clone())
            .bind(micros(older_than))
            .bind(limit(max_rows))
            .execute(&self.pool)
            .await
            .context("deleting processed events")?;
        Ok(result.rows_affected())
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(self.statements.get_event.clone())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .context("reading an outbox event")?;
        row.map(|row| MySqlRowFormat::decode_event(&row, self.table())).transpose()
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(self.statements.count_events.clone())
            .fetch_all(&self.pool)
            .await
            .context("counting outbox events")?;
        Ok(OutboxCounts { by_type_and_status: status_counts(rows, self.table(), "status")? })
    }
}
