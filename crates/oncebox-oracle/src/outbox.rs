//! The relay's outbox DAO: claims as a locking cursor that fetches the batch and an `UPDATE` by
//! ids in one short transaction, settles as one array-bound `UPDATE` fenced by the claim token.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{ClaimedBatch, EventStatus, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::error::OraResultExt;
use crate::row::{Decoded, id_bytes, never_sent, status_counts, utc};
use crate::session::{
    Bind, execute, execute_over_ids, lock, lock_ids, micros, query, query_over_ids, store_daos,
};

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

/// Leaves out of a claim the rows its update did not take (see `claim_update.sql`): `taken` holds
/// the stored ids of the rows that now hold the claim's token.
fn keep_taken(decoded: &mut Decoded<OutboxEvent>, taken: &HashSet<Vec<u8>>) {
    decoded.rows.retain(|event| taken.contains(&id_bytes(event.id)));
    decoded.undecodable.retain(|(raw, _)| taken.contains(raw));
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
                let mut decoded =
                    Decoded::of(&rows, statements.tables.events(), |columns, id| columns.event(id))?;
                let token = id_bytes(claim_token);
                let ids = decoded.stored_ids();
                let first: [Bind<'_>; 2] = [("claim_token", &token), ("claimed_at", &claimed_at)];
                let taken = execute_over_ids(connection, &statements.claim_update, &first, &ids, context)?;
                if taken < ids.len() as u64 {
                    // A row settled after the cursor opened was locked but not taken: it is not
                    // this claim's, and sending it would send a settled event again.
                    let binds: [Bind<'_>; 1] = [("claim_token", &token)];
                    let holding = query_over_ids(connection, &statements.claim_taken, &binds, &ids, context)?;
                    let holding = holding
                        .iter()
                        .map(|row| row.get::<_, Vec<u8>>("ID").context(context))
                        .collect::<Result<HashSet<_>>>()?;
                    let left_out = ids.len().saturating_sub(holding.len());
                    debug!(event_type = %kind, left_out, "a claim left out rows settled after its cursor opened");
                    keep_taken(&mut decoded, &holding);
                }
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
                // The update re-checks that each row is still stuck (recover_update.sql); the rows
                // it changed are the ones recovered.
                let binds: [Bind<'_>; 2] = [("max_recoveries", &limit), ("older_than_micros", &older)];
                execute_over_ids(connection, &statements.recover_update, &binds, &ids, context)
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

    fn event(id: Uuid) -> OutboxEvent {
        let now = chrono::Utc::now();
        OutboxEvent {
            id,
            event_type: "order-created".into(),
            payload: "{}".into(),
            payload_type: "TestEvent".into(),
            headers: Default::default(),
            partition_key: None,
            status: EventStatus::Pending,
            attempts: 0,
            next_retry_at: now,
            created_at: now,
            updated_at: now,
            processed_at: None,
            last_error: None,
            claim_token: None,
        }
    }

    #[test]
    fn a_claim_keeps_only_the_rows_its_update_took() {
        let (kept, settled, bad_kept, bad_settled) = (Uuid::now_v7(), Uuid::now_v7(), vec![1_u8], vec![2_u8]);
        let mut decoded = Decoded {
            rows: vec![event(kept), event(settled)],
            undecodable: vec![
                (bad_kept.clone(), oncebox_core::Error::invalid_input("bad headers")),
                (bad_settled, oncebox_core::Error::invalid_input("bad headers")),
            ],
        };
        let taken: HashSet<Vec<u8>> = [id_bytes(kept), bad_kept.clone()].into_iter().collect();
        keep_taken(&mut decoded, &taken);
        assert_eq!(decoded.rows.iter().map(|event| event.id).collect::<Vec<_>>(), [kept]);
        assert_eq!(decoded.undecodable.iter().map(|(raw, _)| raw.clone()).collect::<Vec<_>>(), [bad_kept]);
    }

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
