//! The relay's outbox DAO: claims as a locking cursor that fetches the batch and an `UPDATE` by
//! ids in one short transaction, settles as one array-bound `UPDATE` fenced by the claim token.

use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{ClaimedBatch, EventStatus, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use tracing::warn;
use uuid::Uuid;

use crate::error::OraResultExt;
use crate::row::{Decoded, id_bytes, never_sent, status_counts, utc};
use crate::session::{Bind, execute, execute_over_ids, lock, lock_ids, micros, query, store_daos};

store_daos! {
    /// [`OutboxDao`] on Oracle.
    OraOutboxDao: events;
}

/// A settlement as bound: id, status, retry delay in microseconds, error text.
type SettleRow = (Vec<u8>, &'static str, i64, Option<String>);

fn settle_row(settlement: &Settlement) -> SettleRow {
    let (status, delay, error) = match settlement {
        Settlement::Processed { .. } => (EventStatus::Processed, 0, None),
        Settlement::Retry { delay, error, .. } => {
            (EventStatus::Pending, micros(*delay), Some(last_error_text(error).to_owned()))
        }
        Settlement::Failed { error, .. } => (EventStatus::Failed, 0, Some(last_error_text(error).to_owned())),
    };
    (id_bytes(settlement.id()), status.as_str(), delay, error)
}

#[async_trait]
impl OutboxDao for OraOutboxDao {
    async fn claim(&self, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = ClaimedBatch { event_type: event_type.to_owned(), claim_token, events: Vec::new() };
        if max_rows == 0 {
            return Ok(batch);
        }
        let kind = event_type.to_owned();
        batch.events = self
            .0
            .call(format!("claiming {event_type}"), move |connection, statements, context| {
                let rows = lock(connection, &statements.claim_lock, &[("event_type", &kind)], max_rows, context)?;
                let Some(first) = rows.first() else {
                    return Ok(Vec::new());
                };
                let claimed_at: NaiveDateTime = first.get("CLAIMED_AT").context(context)?;
                // Each row on its own: one that cannot be read is claimed with the others and
                // given up on in the same transaction, and the others are sent.
                let decoded = Decoded::of(&rows, statements.tables.events(), |columns, id| columns.event(id))?;
                let token = id_bytes(claim_token);
                let ids = decoded.stored_ids();
                let first: [Bind<'_>; 2] = [("claim_token", &token), ("claimed_at", &claimed_at)];
                execute_over_ids(connection, &statements.claim_update, &first, &ids, context)?;
                for (raw, error) in &decoded.undecodable {
                    warn!(event_type = %kind, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
                    let text = never_sent(error);
                    let binds: [Bind<'_>; 3] = [("last_error", &text), ("id", raw), ("claim_token", &token)];
                    execute(connection, &statements.fail_undecodable, &binds, context)?;
                }
                let mut events = decoded.rows;
                for event in &mut events {
                    event.status = EventStatus::InProcess;
                    event.claim_token = Some(claim_token);
                    event.updated_at = utc(claimed_at);
                }
                Ok(events)
            })
            .await?;
        Ok(batch)
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let token = id_bytes(batch.claim_token);
        let outcomes: Vec<SettleRow> = settlements.iter().map(settle_row).collect();
        let context = format!("settling a batch of {}", batch.event_type);
        let settled = self
            .0
            .call(context, move |connection, statements, context| {
                // One execution of an array-bound statement: atomic, one round trip.
                let mut update = connection
                    .batch(&statements.settle, outcomes.len())
                    .with_row_counts()
                    .build()
                    .context(context)?;
                for (id, status, delay, error) in &outcomes {
                    update
                        .append_row_named(&[
                            ("status", status),
                            ("delay_micros", delay),
                            ("last_error", error),
                            ("id", id),
                            ("claim_token", &token),
                        ])
                        .context(context)?;
                }
                update.execute().context(context)?;
                Ok(update.row_counts().context(context)?.iter().sum::<u64>())
            })
            .await?;
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        self.0
            .call("recovering stuck events", move |connection, statements, context| {
                let older = micros(older_than);
                let ids = lock_ids(
                    connection,
                    &statements.recover_lock,
                    &[("older_than_micros", &older)],
                    max_rows,
                    context,
                )?;
                let limit = i64::from(max_recoveries);
                execute_over_ids(
                    connection,
                    &statements.recover_update,
                    &[("max_recoveries", &limit)],
                    &ids,
                    context,
                )
            })
            .await
    }

    async fn delete_processed(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        self.0.delete_aged(|s| &s.delete_processed, older_than, max_rows, "deleting processed events").await
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        self.0
            .call("reading an outbox event", move |connection, statements, context| {
                let rows = query(connection, &statements.get_event, &[("id", &id_bytes(id))], context)?;
                Decoded::one(&rows, statements.tables.events(), |columns, id| columns.event(id))
            })
            .await
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        self.0
            .call("counting outbox events", move |connection, statements, context| {
                let groups = query(connection, &statements.count_events, &[], context)?;
                let mut counts = OutboxCounts {
                    by_type_and_status: status_counts(
                        &groups,
                        statements.tables.events(),
                        "status",
                        "status",
                        context,
                    )?,
                    oldest_pending: Vec::new(),
                };
                for row in query(connection, &statements.oldest_pending, &[], context)? {
                    let (event_type, oldest, now): (String, NaiveDateTime, NaiveDateTime) =
                        row.get_as().context(context)?;
                    // A row written a moment "after" the database's now (a clock step) is 0 ms old.
                    let age = (now - oldest).to_std().unwrap_or_default();
                    let millis = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
                    counts.oldest_pending.push((event_type, Duration::from_millis(millis)));
                }
                Ok(counts)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settlements_bind_status_delay_and_error() {
        let id = Uuid::now_v7();
        assert_eq!(settle_row(&Settlement::Processed { id }), (id_bytes(id), "PROCESSED", 0, None));
        let retry = Settlement::Retry { id, delay: Duration::from_millis(1500), error: "broker down".into() };
        assert_eq!(settle_row(&retry), (id_bytes(id), "PENDING", 1_500_000, Some("broker down".into())));
        let failed = Settlement::Failed { id, error: "x".repeat(5_000) };
        let (_, status, _, error) = settle_row(&failed);
        assert_eq!(status, "FAILED");
        // last_error is VARCHAR2(1000 CHAR): the text is cut to what the column holds.
        assert_eq!(error.map(|text| text.chars().count()), Some(oncebox_core::event::LAST_ERROR_MAX_CHARS));
    }
}
