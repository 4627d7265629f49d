//! The dead letter queue DAO: transfers lock their rows with a cursor that fetches the batch, then
//! copy and delete by ids in the same transaction, so a row is in exactly one table at every
//! commit.

use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use oncebox_core::event::{DlqCounts, DlqFilter, DlqSelection, OlderEvents};
use oncebox_core::{DlqDao, DlqEvent, DlqStatus, Error, OutboxEvent, Result};
use oracle::Row;
use uuid::Uuid;

use crate::error::OraResultExt;
use crate::row::{Decoded, id_bytes, status_counts};
use crate::session::{
    Bind, execute, execute_over_ids, lock, lock_ids, micros, query, query_over_ids, rows, store_daos,
};
use crate::statements::Statements;

store_daos! {
    /// [`DlqDao`] on Oracle.
    OraDlqDao: dlq;
}

impl OraDlqDao {
    /// Runs `by_ids` over the ids of `selection` (chunked), or `by_type` for its event type, with
    /// the DLQ status `status` bound first when given.
    async fn by_selection(
        &self,
        selection: &DlqSelection,
        pick: fn(&Statements) -> [&String; 2],
        status: Option<DlqStatus>,
        context: &'static str,
    ) -> Result<u64> {
        let selection = selection.clone();
        self.0
            .call(context, move |connection, statements, context| {
                let [by_ids, by_type] = pick(statements);
                let status = status.map(DlqStatus::as_str);
                let mut first: Vec<Bind<'_>> = Vec::new();
                if let Some(status) = &status {
                    first.push(("dlq_status", status));
                }
                match &selection {
                    DlqSelection::Ids(ids) => {
                        let ids: Vec<Vec<u8>> = ids.iter().copied().map(id_bytes).collect();
                        execute_over_ids(connection, by_ids, &first, &ids, context)
                    }
                    DlqSelection::EventType(event_type) => {
                        first.push(("event_type", event_type));
                        execute(connection, by_type, &first, context)
                    }
                }
            })
            .await
    }
}

/// What `dlq_older_by_ids` and `dlq_older_by_type` read: each row a count, the oldest write time
/// (`NULL` when none) and the database's now, added up over the rows (one per chunk of ids).
fn older_events(rows: &[Row], context: &str) -> Result<OlderEvents> {
    rows.iter().try_fold(OlderEvents::default(), |older, row| {
        let (count, oldest, now): (i64, Option<NaiveDateTime>, NaiveDateTime) =
            row.get_as().context(context)?;
        // A row written a moment "after" the database's now (a clock step) is 0 ms old.
        let age_ms = oldest.map_or(0, |oldest| (now - oldest).num_milliseconds());
        Ok(older.and(OlderEvents::from_aggregate(count, age_ms)))
    })
}

/// The DLQ filter's binds.
fn filter_values(filter: &DlqFilter) -> (Option<&'static str>, Option<String>) {
    (filter.status.map(DlqStatus::as_str), filter.event_type.clone())
}

#[async_trait]
impl DlqDao for OraDlqDao {
    async fn transfer_to_dlq(&self, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        self.0
            .call("moving failed events to the DLQ", move |connection, statements, context| {
                let locked = lock(connection, &statements.dlq_lock_failed, &[], max_rows, context)?;
                // The rows move whatever they hold; one that cannot be decoded (it failed for that
                // reason) is only left out of the list handed back, for the DLQ handler.
                let decoded =
                    Decoded::of(&locked, statements.tables.events(), |columns, id| columns.event(id))?;
                let ids = decoded.stored_ids();
                for statement in [
                    &statements.dlq_remove_ids,
                    &statements.dlq_copy_failed,
                    &statements.delete_events_by_ids,
                ] {
                    execute_over_ids(connection, statement, &[], &ids, context)?;
                }
                decoded.warn_left_out("a dead letter queue row");
                Ok(decoded.rows)
            })
            .await
    }

    async fn transfer_from_dlq(&self, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        self.0
            .call("moving DLQ events back to the outbox", move |connection, statements, context| {
                let ids = lock_ids(connection, &statements.dlq_lock_to_retry, &[], max_rows, context)?;
                execute_over_ids(connection, &statements.delete_events_by_ids, &[], &ids, context)?;
                let moved =
                    execute_over_ids(connection, &statements.events_insert_from_dlq, &[], &ids, context)?;
                execute_over_ids(connection, &statements.dlq_remove_ids, &[], &ids, context)?;
                Ok(moved)
            })
            .await
    }

    async fn delete_resolved(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        self.0
            .delete_aged(|s| &s.dlq_delete_resolved, older_than, max_rows, "deleting resolved DLQ events")
            .await
    }

    async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>> {
        self.0
            .call("reading a DLQ event", move |connection, statements, context| {
                let rows = query(connection, &statements.dlq_get, &[("id", &id_bytes(id))], context)?;
                Decoded::one(&rows, statements.tables.dlq(), |columns, id| columns.dlq_event(id))
            })
            .await
    }

    async fn list(&self, filter: &DlqFilter, offset: u64, max_rows: u32) -> Result<Vec<DlqEvent>> {
        if max_rows == 0 {
            return Ok(Vec::new());
        }
        let (status, event_type) = filter_values(filter);
        self.0
            .call("listing DLQ events", move |connection, statements, context| {
                let skip = i64::try_from(offset).unwrap_or(i64::MAX);
                let limit = rows(max_rows);
                let binds: [Bind<'_>; 4] = [
                    ("dlq_status", &status),
                    ("event_type", &event_type),
                    ("skip", &skip),
                    ("max_rows", &limit),
                ];
                let rows = query(connection, &statements.dlq_list, &binds, context)?;
                let decoded =
                    Decoded::of(&rows, statements.tables.dlq(), |columns, id| columns.dlq_event(id))?;
                decoded.warn_left_out("a dead letter queue row");
                Ok(decoded.rows)
            })
            .await
    }

    async fn count(&self, filter: &DlqFilter) -> Result<u64> {
        let (status, event_type) = filter_values(filter);
        self.0
            .call("counting DLQ events", move |connection, statements, context| {
                let binds: [Bind<'_>; 2] = [("dlq_status", &status), ("event_type", &event_type)];
                let count: i64 = crate::error::OraResultExt::context(
                    connection.query_row_as_named(&statements.dlq_count, &binds),
                    context,
                )?;
                Ok(u64::try_from(count).unwrap_or_default())
            })
            .await
    }

    async fn set_status(&self, selection: &DlqSelection, status: DlqStatus) -> Result<u64> {
        if !status.is_settable() {
            return Err(Error::invalid_input(format!(
                "DLQ status {status} cannot be set; use MOVED, RESOLVED or TO_RETRY"
            )));
        }
        fn pick(s: &Statements) -> [&String; 2] {
            [&s.dlq_set_status_by_ids, &s.dlq_set_status_by_type]
        }
        self.by_selection(selection, pick, Some(status), "changing the status of DLQ events").await
    }

    async fn delete(&self, selection: &DlqSelection) -> Result<u64> {
        fn pick(s: &Statements) -> [&String; 2] {
            [&s.dlq_delete_by_ids, &s.dlq_delete_by_type]
        }
        self.by_selection(selection, pick, None, "deleting DLQ events").await
    }

    async fn older_than(&self, selection: &DlqSelection, age: Duration) -> Result<OlderEvents> {
        let selection = selection.clone();
        self.0
            .call("aging DLQ events", move |connection, statements, context| {
                let older_than = micros(age);
                let mut first: Vec<Bind<'_>> = vec![("older_than_micros", &older_than)];
                let rows = match &selection {
                    DlqSelection::Ids(ids) => {
                        let ids: Vec<Vec<u8>> = ids.iter().copied().map(id_bytes).collect();
                        query_over_ids(connection, &statements.dlq_older_by_ids, &first, &ids, context)?
                    }
                    DlqSelection::EventType(event_type) => {
                        first.push(("event_type", event_type));
                        query(connection, &statements.dlq_older_by_type, &first, context)?
                    }
                };
                older_events(&rows, context)
            })
            .await
    }

    async fn counts(&self) -> Result<DlqCounts> {
        self.0
            .call("counting DLQ events", move |connection, statements, context| {
                let groups = query(connection, &statements.dlq_counts, &[], context)?;
                let table = statements.tables.dlq();
                Ok(DlqCounts {
                    by_type_and_status: status_counts(&groups, table, "dlq_status", "DLQ status", context)?,
                })
            })
            .await
    }
}
