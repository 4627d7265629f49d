//! What a backend provides so the suites can run against it.

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Dialect, NewOutboxEvent, Result};
use uuid::Uuid;

/// A table whose timestamps a test can move into the past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgedTable {
    /// `outbox_events`: `created_at`, `updated_at`, `processed_at` and `next_retry_at`.
    Events,
    /// `outbox_dlq_events`: `updated_at` and `moved_at`.
    Dlq,
    /// `outbox_consumed_events`: `consumed_at`.
    Consumed,
    /// `outbox_jobs`: `locked_until` and `locked_at`.
    Jobs,
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

    /// Moves every timestamp of `table` (only of the rows with these ids, or all rows when `ids`
    /// is empty) `by` into the past, so age thresholds can be tested without waiting.
    async fn backdate(
        &self,
        dialect: &Self::Dialect,
        table: AgedTable,
        ids: &[Uuid],
        by: Duration,
    ) -> Result<()>;

    /// Releases what `fresh` created (drops tables, deletes files). Called at the end of each test.
    async fn dispose(&self, dialect: Self::Dialect) -> Result<()>;
}
