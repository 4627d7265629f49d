//! The write side: outbox rows and inbox records inside the caller's open transaction.

use std::sync::Arc;

use oncebox_core::activity::PollerActivity;
use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::queries::PgQueries;
use oncebox_sqlx::Queries;

/// Writes outbox rows and inbox records into a caller's `sqlx::Transaction<'_, Postgres>`. It never
/// begins or commits: the rows become visible when the caller commits, and vanish on rollback.
///
/// A single event is one `INSERT … SELECT` of scalar parameters; a batch is one `INSERT … SELECT
/// FROM UNNEST(…)` statement whatever its size (six array parameters, not six per row). With
/// wake-ups on (the default), the same statement also issues one `pg_notify` per distinct event
/// type of the call; PostgreSQL delivers notifications only when the transaction commits and
/// collapses identical ones within a transaction, so listeners hear of each event type at most
/// once per commit. A type whose poller in this process is awake (draining, certain to claim again
/// at once) is not notified: the NOTIFY's commit-time cost buys nothing then (see
/// [`oncebox_core::activity`]).
///
/// With the `tokio-postgres` feature it also writes into `&tokio_postgres::Transaction<'_>` (and
/// records inbox ids in a `tokio_postgres::Transaction<'_>`), running the very same SQL.
///
/// Obtained from [`PgDialect::writer`](oncebox_core::Dialect::writer); cheap to clone.
#[derive(Clone)]
pub struct PgWriter {
    statements: Arc<PgQueries>,
    notify: bool,
    activity: Arc<PollerActivity>,
}

impl std::fmt::Debug for PgWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWriter")
            .field("tables", self.statements.tables())
            .field("notify", &self.notify)
            .finish()
    }
}

/// The insert's parameter arrays, one element per event, plus the distinct event types to notify.
pub(crate) struct InsertArrays<'e> {
    pub(crate) ids: Vec<Uuid>,
    pub(crate) event_types: Vec<&'e str>,
    pub(crate) payloads: Vec<&'e str>,
    pub(crate) payload_types: Vec<&'e str>,
    pub(crate) headers: Vec<String>,
    pub(crate) partition_keys: Vec<Option<&'e str>>,
    /// Each event type to notify once, in first-seen order.
    pub(crate) distinct_types: Vec<&'e str>,
}

impl<'e> InsertArrays<'e> {
    /// The arrays of `events`; an event type is notified when `notify` says so.
    pub(crate) fn new(events: &'e [NewOutboxEvent], notify: impl Fn(&str) -> bool) -> Self {
        let mut seen: Vec<&str> = Vec::new();
        for event in events {
            // A call carries few event types, so a linear scan beats hashing.
            if !seen.contains(&event.event_type.as_str()) {
                seen.push(&event.event_type);
            }
        }
        let distinct_types = seen.into_iter().filter(|event_type| notify(event_type)).collect();
        Self {
            ids: events.iter().map(|event| event.id).collect(),
            event_types: events.iter().map(|event| event.event_type.as_str()).collect(),
            payloads: events.iter().map(|event| event.payload.as_str()).collect(),
            payload_types: events.iter().map(|event| event.payload_type.as_str()).collect(),
            headers: events.iter().map(NewOutboxEvent::headers_json).collect(),
            partition_keys: events.iter().map(|event| event.partition_key.as_deref()).collect(),
            distinct_types,
        }
    }
}

impl PgWriter {
    pub(crate) fn new(statements: Arc<PgQueries>, notify: bool, activity: Arc<PollerActivity>) -> Self {
        Self { statements, notify, activity }
    }

    /// Whether a write of `event_type` sends its NOTIFY: wake-ups are on and no poller of this
    /// process is certain to claim the type soon anyway ([`oncebox_core::activity`]).
    fn notifies_for(&self, event_type: &str) -> bool {
        self.notify && !self.activity.is_awake(event_type)
    }

    /// Whether writes also send a wake-up NOTIFY.
    pub fn notifies(&self) -> bool {
        self.notify
    }

    /// The NOTIFY channel written to (derived from the table prefix).
    pub fn channel(&self) -> &str {
        &self.statements.channel
    }
}

impl<'t, 'c> OutboxWriter<&'t mut Transaction<'c, Postgres>> for PgWriter {
    /// Inserts `events` as PENDING rows due now, in one statement.
    async fn write(&self, tx: &'t mut Transaction<'c, Postgres>, events: &[NewOutboxEvent]) -> Result<()> {
        let event = match events {
            [] => return Ok(()),
            [event] => event,
            _ => return self.write_batch(tx, events).await,
        };
        let notify = self.notifies_for(&event.event_type);
        let statement = if notify {
            self.statements.insert_event_notify.clone()
        } else {
            self.statements.insert_event.clone()
        };
        let mut query = sqlx::query(statement)
            .bind(event.id)
            .bind(event.event_type.as_str())
            .bind(event.payload.as_str())
            .bind(event.payload_type.as_str())
            .bind(event.headers_json())
            .bind(event.partition_key.as_deref());
        if notify {
            query = query.bind(self.statements.channel.as_str());
        }
        query.execute(&mut **tx).await.context("writing an outbox event")?;
        Ok(())
    }
}

impl PgWriter {
    /// Two events or more: one `UNNEST` statement.
    async fn write_batch(&self, tx: &mut Transaction<'_, Postgres>, events: &[NewOutboxEvent]) -> Result<()> {
        let arrays = InsertArrays::new(events, |event_type| self.notifies_for(event_type));
        let notify = !arrays.distinct_types.is_empty();
        let statement = if notify {
            self.statements.insert_events_notify.clone()
        } else {
            self.statements.insert_events.clone()
        };
        let mut query = sqlx::query(statement)
            .bind(&arrays.ids)
            .bind(&arrays.event_types)
            .bind(&arrays.payloads)
            .bind(&arrays.payload_types)
            .bind(&arrays.headers)
            .bind(&arrays.partition_keys);
        if notify {
            query = query.bind(self.statements.channel.as_str()).bind(&arrays.distinct_types);
        }
        query.execute(&mut **tx).await.context("writing outbox events")?;
        Ok(())
    }
}

impl<'c> InboxWriter<Transaction<'c, Postgres>> for PgWriter {
    async fn record(&self, tx: &mut Transaction<'c, Postgres>, consumer: &str, id: Uuid) -> Result<bool> {
        self.statements.record_on(tx, consumer, id).await
    }

    async fn record_many(
        &self,
        tx: &mut Transaction<'c, Postgres>,
        consumer: &str,
        ids: &[Uuid],
    ) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.statements.record_many_on(tx, consumer, ids).await
    }
}

/// The same statements for tokio-postgres (and deadpool-postgres, whose transactions dereference
/// to tokio-postgres ones): the SQL text is the sqlx writer's, so both produce identical rows.
#[cfg(feature = "tokio-postgres")]
mod tokio_postgres_writer {
    use std::collections::HashSet;

    use oncebox_core::{InboxWriter, NewOutboxEvent, OutboxWriter, Result};
    use tokio_postgres::Transaction;
    use tokio_postgres::types::ToSql;
    use uuid::Uuid;

    use super::{InsertArrays, PgWriter};
    use crate::error::tokio_postgres_error;

    impl<'t, 'c> OutboxWriter<&'t Transaction<'c>> for PgWriter {
        /// Inserts `events` as PENDING rows due now, in one statement (plus the wake-up NOTIFY
        /// when on, in the same statement).
        async fn write(&self, tx: &'t Transaction<'c>, events: &[NewOutboxEvent]) -> Result<()> {
            if events.is_empty() {
                return Ok(());
            }
            let channel = self.statements.channel.as_str();
            if let [event] = events {
                let headers = event.headers_json();
                let partition_key = event.partition_key.as_deref();
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![
                    &event.id,
                    &event.event_type,
                    &event.payload,
                    &event.payload_type,
                    &headers,
                    &partition_key,
                ];
                let statement = if self.notifies_for(&event.event_type) {
                    params.push(&channel);
                    self.statements.insert_event_notify.as_str()
                } else {
                    self.statements.insert_event.as_str()
                };
                tx.execute(statement, &params)
                    .await
                    .map_err(|error| tokio_postgres_error("writing an outbox event", error))?;
                return Ok(());
            }
            let arrays = InsertArrays::new(events, |event_type| self.notifies_for(event_type));
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![
                &arrays.ids,
                &arrays.event_types,
                &arrays.payloads,
                &arrays.payload_types,
                &arrays.headers,
                &arrays.partition_keys,
            ];
            let statement = if !arrays.distinct_types.is_empty() {
                params.push(&channel);
                params.push(&arrays.distinct_types);
                self.statements.insert_events_notify.as_str()
            } else {
                self.statements.insert_events.as_str()
            };
            tx.execute(statement, &params)
                .await
                .map_err(|error| tokio_postgres_error("writing outbox events", error))?;
            Ok(())
        }
    }

    impl<'c> InboxWriter<Transaction<'c>> for PgWriter {
        async fn record(&self, tx: &mut Transaction<'c>, consumer: &str, id: Uuid) -> Result<bool> {
            let inserted = tx
                .execute(self.statements.common.inbox_record.as_str(), &[&consumer, &id])
                .await
                .map_err(|error| tokio_postgres_error("recording a consumed event", error))?;
            Ok(inserted == 1)
        }

        async fn record_many(
            &self,
            tx: &mut Transaction<'c>,
            consumer: &str,
            ids: &[Uuid],
        ) -> Result<Vec<Uuid>> {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let rows = tx
                .query(self.statements.inbox_record_many.as_str(), &[&consumer, &ids])
                .await
                .map_err(|error| tokio_postgres_error("recording consumed events", error))?;
            let new = rows
                .iter()
                .map(|row| row.try_get::<_, Uuid>(0))
                .collect::<Result<HashSet<Uuid>, _>>()
                .map_err(|error| tokio_postgres_error("recording consumed events", error))?;
            Ok(oncebox_core::inbox::in_input_order(ids, new))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_are_notified_once_each_in_first_seen_order() {
        let event = |event_type: &str| NewOutboxEvent {
            id: Uuid::now_v7(),
            event_type: event_type.into(),
            payload: "{}".into(),
            payload_type: "T".into(),
            headers: Default::default(),
            partition_key: None,
        };
        let events = [event("b"), event("a"), event("b"), event("b"), event("a")];
        let arrays = InsertArrays::new(&events, |_| true);
        assert_eq!(arrays.distinct_types, vec!["b", "a"]);
        assert_eq!(InsertArrays::new(&events, |event_type| event_type == "a").distinct_types, vec!["a"]);
        assert!(InsertArrays::new(&events, |_| false).distinct_types.is_empty());
        assert_eq!(arrays.event_types.len(), 5);
        assert_eq!(arrays.headers[0], "{}");
    }
}
