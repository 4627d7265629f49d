//! The relay's outbox DAO: claims as a locking cursor that fetches the batch and an `UPDATE` by
//! ids in one short transaction, settles as one array-bound `UPDATE` fenced by the claim token.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use oncebox_core::event::{OutboxCounts, last_error_text};
use oncebox_core::{
    ClaimedBatch, Error, ErrorKind, EventStatus, OutboxDao, OutboxEvent, Result, SettleReport, Settlement,
};
use tracing::warn;
use uuid::Uuid;

use crate::error::OraResultExt;
use crate::row::{Decoded, id_bytes, never_sent, utc};
use crate::session::{Db, execute, execute_over_ids, lock, micros, query, rows, transaction};
use crate::statements::Statements;

/// [`OutboxDao`] on Oracle.
#[derive(Clone)]
pub struct OraOutboxDao {
    pub(crate) db: Db,
    pub(crate) statements: Arc<Statements>,
}

impl std::fmt::Debug for OraOutboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OraOutboxDao").field("table", &self.statements.tables.events()).finish()
    }
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
        let statements = Arc::clone(&self.statements);
        let kind = event_type.to_owned();
        let context = format!("claiming {event_type}");
        batch.events = self
            .db
            .run(&context.clone(), move |connection| {
                transaction(connection, &context, |connection| {
                    let rows = lock(connection, &statements.claim_lock, &[("event_type", &kind)], max_rows, &context)?;
                    let Some(first) = rows.first() else {
                        return Ok(Vec::new());
                    };
                    let claimed_at: NaiveDateTime = first.get("CLAIMED_AT").context(&context)?;
                    // Each row on its own: one that cannot be read is claimed with the others and
                    // given up on in the same transaction, and the others are sent.
                    let decoded = Decoded::of(&rows, statements.tables.events(), |columns, id| columns.event(id))?;
                    let token = id_bytes(claim_token);
                    let ids: Vec<Vec<u8>> = decoded
                        .rows
                        .iter()
                        .map(|event| id_bytes(event.id))
                        .chain(decoded.undecodable.iter().map(|(raw, _)| raw.clone()))
                        .collect();
                    let first = [("claim_token", &token as _), ("claimed_at", &claimed_at as _)];
                    execute_over_ids(connection, &statements.claim_update, &first, &ids, &context)?;
                    for (raw, error) in &decoded.undecodable {
                        warn!(event_type = %kind, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
                        let text = never_sent(error);
                        let binds = [("last_error", &text as _), ("id", raw as _), ("claim_token", &token as _)];
                        execute(connection, &statements.fail_undecodable, &binds, &context)?;
                    }
                    let mut events = decoded.rows;
                    for event in &mut events {
                        event.status = EventStatus::InProcess;
                        event.claim_token = Some(claim_token);
                        event.updated_at = utc(claimed_at);
                    }
                    Ok(events)
                })
            })
            .await?;
        Ok(batch)
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        if settlements.is_empty() {
            return Ok(SettleReport::default());
        }
        let statements = Arc::clone(&self.statements);
        let token = id_bytes(batch.claim_token);
        let outcomes: Vec<SettleRow> = settlements.iter().map(settle_row).collect();
        let context = format!("settling a batch of {}", batch.event_type);
        let settled = self
            .db
            .run(&context.clone(), move |connection| {
                transaction(connection, &context, |connection| {
                    // One execution of an array-bound statement: atomic, one round trip.
                    let mut update = connection
                        .batch(&statements.settle, outcomes.len())
                        .with_row_counts()
                        .build()
                        .context(&context)?;
                    for (id, status, delay, error) in &outcomes {
                        update
                            .append_row_named(&[
                                ("status", status),
                                ("delay_micros", delay),
                                ("last_error", error),
                                ("id", id),
                                ("claim_token", &token),
                            ])
                            .context(&context)?;
                    }
                    update.execute().context(&context)?;
                    Ok(update.row_counts().context(&context)?.iter().sum::<u64>())
                })
            })
            .await?;
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let statements = Arc::clone(&self.statements);
        let context = "recovering stuck events";
        self.db
            .run(context, move |connection| {
                transaction(connection, context, |connection| {
                    let older = micros(older_than);
                    let locked = lock(
                        connection,
                        &statements.recover_lock,
                        &[("older_than_micros", &older)],
                        max_rows,
                        context,
                    )?;
                    let ids = locked
                        .iter()
                        .map(|row| row.get::<_, Vec<u8>>("ID").context(context))
                        .collect::<Result<Vec<_>>>()?;
                    let limit = i64::from(max_recoveries);
                    execute_over_ids(
                        connection,
                        &statements.recover_update,
                        &[("max_recoveries", &limit)],
                        &ids,
                        context,
                    )
                })
            })
            .await
    }

    async fn delete_processed(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let statements = Arc::clone(&self.statements);
        let context = "deleting processed events";
        self.db
            .run(context, move |connection| {
                transaction(connection, context, |connection| {
                    let binds =
                        [("older_than_micros", &micros(older_than) as _), ("max_rows", &rows(max_rows) as _)];
                    execute(connection, &statements.delete_processed, &binds, context)
                })
            })
            .await
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        let statements = Arc::clone(&self.statements);
        let context = "reading an outbox event";
        self.db
            .run(context, move |connection| {
                let rows = query(connection, &statements.get_event, &[("id", &id_bytes(id))], context)?;
                let mut decoded =
                    Decoded::of(&rows, statements.tables.events(), |columns, id| columns.event(id))?;
                if let Some((_, error)) = decoded.undecodable.pop() {
                    return Err(error);
                }
                Ok(decoded.rows.pop())
            })
            .await
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        let statements = Arc::clone(&self.statements);
        let context = "counting outbox events";
        self.db
            .run(context, move |connection| {
                let table = statements.tables.events();
                let mut counts = OutboxCounts::default();
                for row in query(connection, &statements.count_events, &[], context)? {
                    let (event_type, status, count): (String, String, i64) = row.get_as().context(context)?;
                    let status = status.parse::<EventStatus>().map_err(|_| {
                        Error::new(ErrorKind::Decode, format!("{table}.status: unknown status '{status}'"))
                    })?;
                    counts.by_type_and_status.push((
                        event_type,
                        status,
                        u64::try_from(count).unwrap_or_default(),
                    ));
                }
                for row in query(connection, &statements.oldest_pending, &[], context)? {
                    let (event_type, oldest, now): (String, NaiveDateTime, NaiveDateTime) =
                        row.get_as().context(context)?;
                    // A row written a moment "after" the database's now (a clock step) is 0 ms old.
                    let age = (now - oldest).to_std().unwrap_or_default();
                    counts.oldest_pending.push((event_type, Duration::from_millis(age.as_millis() as u64)));
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
