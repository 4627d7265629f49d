//! The relay's access to the outbox table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{ClaimedBatch, EventStatus, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use oncebox_sqlx::{DecodeRow, status_counts};
use sqlx::PgPool;
use tracing::warn;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::row::PgRowFormat;
use crate::statements::Statements;
use crate::time::{limit, micros};

/// `last_error` keeps at most this many characters of a failure text.
/// [`OutboxDao`] for PostgreSQL. A claim is one `UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)`
/// statement, so any number of instances claim from one table without ever sharing a row and
/// without holding locks while the broker is called; a settle is one `UPDATE … WHERE id = ANY(…)`
/// when every event was delivered and one `UPDATE … FROM UNNEST(…)` otherwise, guarded by the claim
/// token.
#[derive(Clone)]
pub struct PgOutboxDao {
    pool: PgPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for PgOutboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOutboxDao").field("table", &self.statements.tables.events()).finish()
    }
}

impl PgOutboxDao {
    pub(crate) fn new(pool: PgPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }

    fn table(&self) -> &str {
        self.statements.tables.events()
    }
}

/// The settle statement's parameter arrays, one element per settlement.
struct SettleArrays {
    ids: Vec<Uuid>,
    statuses: Vec<&'static str>,
    delays: Vec<i64>,
    errors: Vec<Option<String>>,
}

impl SettleArrays {
    fn new(settlements: &[Settlement]) -> Self {
        let mut arrays = Self {
            ids: Vec::with_capacity(settlements.len()),
            statuses: Vec::with_capacity(settlements.len()),
            delays: Vec::with_capacity(settlements.len()),
            errors: Vec::with_capacity(settlements.len()),
        };
        for settlement in settlements {
            let (status, delay, error) = match settlement {
                Settlement::Processed { .. } => (EventStatus::Processed, 0, None),
                Settlement::Retry { delay, error, .. } => {
                    (EventStatus::Pending, micros(*delay), Some(last_error_text(error).to_owned()))
                }
                Settlement::Failed { error, .. } => {
                    (EventStatus::Failed, 0, Some(last_error_text(error).to_owned()))
                }
            };
            arrays.ids.push(settlement.id());
            arrays.statuses.push(status.as_str());
            arrays.delays.push(delay);
            arrays.errors.push(error);
        }
        arrays
    }
}

#[async_trait]
impl OutboxDao for PgOutboxDao {
    async fn claim(&self, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = ClaimedBatch { event_type: event_type.to_owned(), claim_token, events: Vec::new() };
        if max_rows == 0 {
            return Ok(batch);
        }
        let rows = sqlx::query(self.statements.claim.clone())
            .bind(event_type)
            .bind(limit(max_rows))
            .bind(claim_token)
            .fetch_all(&self.pool)
            .await
            .context(&format!("claiming {event_type}"))?;
        // Each row on its own: one that cannot be read is given up on, and the others are sent.
        // The claim has committed, so this is a second statement fenced by the claim token. If it
        // fails, the healthy rows are still returned and sent (failing the claim would leave them
        // IN_PROCESS and charge each a recovery); the bad ones wait for stuck recovery, which
        // fails them after `max-recoveries`.
        let decoded = PgRowFormat::decode_events(&rows, self.table())?;
        if !decoded.undecodable.is_empty() {
            let (ids, errors): (Vec<Uuid>, Vec<String>) = decoded.undecodable_failures().into_iter().unzip();
            for (id, error) in ids.iter().zip(&errors) {
                warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marking it FAILED");
            }
            let failed = sqlx::query(self.statements.fail_undecodable.clone())
                .bind(claim_token)
                .bind(&ids)
                .bind(errors)
                .execute(&self.pool)
                .await;
            if let Err(error) = failed {
                warn!(
                    event_type, ids = ?ids, %error,
                    "could not mark undecodable outbox rows FAILED; stuck recovery will return them and \
                     fail them after max-recoveries"
                );
            }
        }
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
        let all_delivered = settlements.iter().all(|s| matches!(s, Settlement::Processed { .. }));
        let query = if all_delivered {
            let ids: Vec<Uuid> = settlements.iter().map(Settlement::id).collect();
            sqlx::query(self.statements.settle_processed.clone()).bind(batch.claim_token).bind(ids)
        } else {
            let arrays = SettleArrays::new(settlements);
            sqlx::query(self.statements.settle.clone())
                .bind(batch.claim_token)
                .bind(arrays.ids)
                .bind(arrays.statuses)
                .bind(arrays.delays)
                .bind(arrays.errors)
        };
        let settled = query
            .execute(&self.pool)
            .await
            .context(&format!("settling a batch of {}", batch.event_type))?
            .rows_affected();
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.recover_stuck.clone())
            .bind(micros(older_than))
            .bind(limit(max_rows))
            .bind(i64::from(max_recoveries))
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
        row.map(|row| PgRowFormat::decode_event(&row, self.table())).transpose()
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(self.statements.count_events.clone())
            .fetch_all(&self.pool)
            .await
            .context("counting outbox events")?;
        Ok(OutboxCounts { by_type_and_status: status_counts(rows, self.table(), "status")? })
    }
}
