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
