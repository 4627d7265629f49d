//! What a backend provides so the suites can run against it.

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Dialect, NewOutboxEvent, Result, TableNames};
use uuid::Uuid;

/// A table whose timestamps a test can move into the past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgedTable {
    /// `outbox_events`: `created_at`, `updated_at`, `processed_at` and `next_retry_at`.
    Events,
    /// `outbox_dlq_events`: `updated_at` and `moved_at`.
    Dlq,
    /// `outbox_consumed_events`: `consumed_at` and a claim's `locked_at`.
    Consumed,
    /// `outbox_jobs`: `locked_until` and `locked_at`.
    Jobs,
    /// `outbox_inbox_messages`: `received_at`, `available_at`, `processed_at` and `locked_at`.
    Inbox,
}

impl AgedTable {
    /// The table's name in `tables`.
    pub fn name(self, tables: &TableNames) -> &str {
        match self {
            AgedTable::Events => tables.events(),
            AgedTable::Dlq => tables.dlq(),
            AgedTable::Consumed => tables.consumed(),
            AgedTable::Jobs => tables.jobs(),
            AgedTable::Inbox => tables.inbox(),
        }
    }

    /// The timestamp columns [`DaoHarness::backdate`] moves.
    pub fn timestamps(self) -> &'static [&'static str] {
        match self {
            AgedTable::Events => &["created_at", "updated_at", "processed_at", "next_retry_at"],
            AgedTable::Dlq => &["updated_at", "moved_at"],
            AgedTable::Consumed => &["consumed_at", "locked_at"],
            AgedTable::Jobs => &["locked_until", "locked_at"],
            AgedTable::Inbox => &["received_at", "available_at", "processed_at", "locked_at"],
        }
    }

    /// Whether rows are picked by event id; job locks are keyed by name, so they are always
    /// backdated as a whole.
    pub fn keyed_by_id(self) -> bool {
        self != AgedTable::Jobs
    }

    /// `UPDATE <table> SET <assignment of each timestamp> WHERE <filter>`: the statement every
    /// dialect's [`DaoHarness::backdate`] runs, in which only the interval arithmetic and the id
    /// filter differ between databases.
    pub fn backdate_statement(
        self,
        tables: &TableNames,
        assignment: impl Fn(&str) -> String,
        filter: &str,
    ) -> String {
        let assignments: Vec<String> = self.timestamps().iter().map(|column| assignment(column)).collect();
        format!("UPDATE {} SET {} WHERE {filter}", self.name(tables), assignments.join(", "))
    }
}

/// A random table prefix for one test, so tests sharing a database never see each other's rows.
pub fn random_prefix() -> String {
    format!("t_{}_", &Uuid::new_v4().simple().to_string()[..10])
}

/// A database backend under test. Each call to [`fresh`](DaoHarness::fresh) returns a dialect
/// isolated from every other test (its own database file, schema or table prefix) with all four
/// tables created.
#[async_trait]
pub trait DaoHarness: Send + Sync + 'static {
    /// The dialect under test.
    type Dialect: Dialect;

    /// A new, isolated dialect with its schema created.
    async fn fresh(&self) -> Result<Self::Dialect>;

    /// Writes `events` through the dialect's writer inside a new transaction, then commits it
    /// (`commit: true`) or rolls it back.
    async fn publish(&self, dialect: &Self::Dialect, events: &[NewOutboxEvent], commit: bool) -> Result<()>;

    /// Records inbox ids through the dialect's writer inside a new transaction, then commits or
    /// rolls back. Returns the ids that were new.
    async fn record_in_transaction(
        &self,
        dialect: &Self::Dialect,
        consumer: &str,
        ids: &[Uuid],
        commit: bool,
    ) -> Result<Vec<Uuid>>;

    /// Settles durable inbox message `(consumer, id)` PROCESSED through the dialect's
    /// [`StoredInboxTransactions::finish_in`](oncebox_core::StoredInboxTransactions::finish_in)
    /// inside a new transaction, then commits or rolls back; whether `token` still held it.
    async fn finish_stored_in_transaction(
        &self,
        dialect: &Self::Dialect,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        commit: bool,
    ) -> Result<bool>;

    /// Moves every timestamp of `table` (only of the rows with these ids, or all rows when `ids`
    /// is empty) `by` into the past, so age thresholds can be tested without waiting.
    async fn backdate(
        &self,
        dialect: &Self::Dialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()>;

    /// Overwrites the stored `headers` column of row `id` of `table` ([`AgedTable::Events`] or
    /// [`AgedTable::Dlq`]) with `text`, bypassing the writer, so a case can store what a bug, a
    /// manual edit or another tool could leave there (e.g. JSON that is not an object of strings).
    async fn overwrite_headers(
        &self,
        dialect: &Self::Dialect,
        table: AgedTable,
        id: Uuid,
        text: &str,
    ) -> Result<()>;

    /// Runs `sql` (statements whose table names are written `{events}`, `{dlq}`, `{consumed}`,
    /// `{jobs}`) on the dialect's tables, for the few cases that must change a table in a way
    /// every database spells alike, such as dropping a column to stand for an older schema.
    async fn execute_sql(&self, dialect: &Self::Dialect, sql: &str) -> Result<()>;

    /// Releases what `fresh` created (drops tables, deletes files). Called at the end of each test.
    async fn dispose(&self, dialect: Self::Dialect) -> Result<()>;

    /// Another dialect over the tables of `dialect`, on a connection pool of its own, as a second
    /// process sharing the database would have. `None` (the default) when the backend cannot give
    /// one; the cases with several engine instances then report that they were skipped.
    async fn another_instance(&self, dialect: &Self::Dialect) -> Result<Option<Self::Dialect>> {
        let _ = dialect;
        Ok(None)
    }

    /// Closes an instance made by [`another_instance`](DaoHarness::another_instance), leaving the
    /// tables to [`dispose`](DaoHarness::dispose). The default drops it.
    async fn close_instance(&self, instance: Self::Dialect) -> Result<()> {
        drop(instance);
        Ok(())
    }
}

/// Runs `body` on a fresh dialect of `harness` and disposes of the dialect afterwards, also when
/// the body fails or panics, so a failing case leaves no tables behind.
pub async fn with_fresh<H, F, Fut>(harness: std::sync::Arc<H>, body: F) -> crate::runner::TestResult
where
    H: DaoHarness,
    F: FnOnce(std::sync::Arc<H>, H::Dialect) -> Fut,
    Fut: std::future::Future<Output = crate::runner::TestResult>,
    H::Dialect: Clone,
{
    use futures::FutureExt;
    use std::panic::AssertUnwindSafe;

    let dialect = harness.fresh().await.map_err(crate::runner::fail)?;
    let outcome = AssertUnwindSafe(body(harness.clone(), dialect.clone())).catch_unwind().await;
    let disposed = harness.dispose(dialect).await;
    match outcome {
        Err(panic) => std::panic::resume_unwind(panic),
        Ok(result) => {
            result?;
            disposed.map_err(crate::runner::fail)
        }
    }
}

/// Polls `check` every 20 ms until it is true; fails naming `what` once `within` has passed.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F) -> crate::runner::TestResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, crate::runner::Failed>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if check().await? {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(crate::runner::fail(format!("timed out after {within:?} waiting until {what}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Moves every pending event of `event_types` to the DLQ the engine's way: claimed, failed for
/// good with the error "broker said no", transferred. Returns the events that arrived, so tools
/// and APIs over the DLQ are tested on rows the relay itself would have left.
pub async fn fail_into_dlq<'a, D: Dialect>(
    dialect: &D,
    event_types: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<oncebox_core::OutboxEvent>> {
    let outbox = dialect.outbox_dao();
    for event_type in event_types {
        loop {
            let batch = outbox.claim(event_type, 500).await?;
            if batch.events.is_empty() {
                break;
            }
            let failed: Vec<oncebox_core::Settlement> = batch
                .events
                .iter()
                .map(|event| oncebox_core::Settlement::Failed {
                    id: event.id,
                    error: "broker said no".into(),
                })
                .collect();
            outbox.settle(&batch, &failed).await?;
        }
    }
    let dlq = dialect.dlq_dao();
    let mut moved = Vec::new();
    loop {
        let batch = dlq.transfer_to_dlq(500).await?;
        if batch.is_empty() {
            return Ok(moved);
        }
        moved.extend(batch);
    }
}
