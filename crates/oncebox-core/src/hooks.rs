//! Optional hooks the engine and the inbox call: metrics recording and the consumed-id cache.
//! Both default to no-ops; `oncebox-metrics` and `oncebox-cache` implement them.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

/// How one task run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
    /// The run finished; `full` when it processed a whole batch.
    Succeeded {
        /// Whether the run processed a full batch (more work is likely waiting).
        full: bool,
    },
    /// The run returned an error (logged by the engine).
    Failed,
    /// A clean-up run skipped because another instance holds the job lock.
    Skipped,
}

/// What happened in the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxOutcome {
    /// The effect ran and its id was recorded.
    Consumed,
    /// The id was already recorded; the effect was skipped.
    Duplicate,
    /// The operation failed; nothing was recorded.
    Failed,
    /// Old records removed by clean-up.
    Cleaned,
}

/// What happened to a message of a durable inbox ([`crate::stored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoredOutcome {
    /// A listener stored it.
    Stored,
    /// A listener met its id stored already: no second row.
    Duplicate,
    /// A run's effect committed with PROCESSED.
    Processed,
    /// A run failed; the message runs again later.
    Retried,
    /// The message was given up: FAILED, kept for a person.
    Failed,
    /// A run outlasted its claim's lease and another poller took the message over; the run's work
    /// was rolled back.
    TakenOver,
}

impl StoredOutcome {
    /// The metric label: `stored`, `duplicate`, `processed`, `retried`, `failed`, `taken_over`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoredOutcome::Stored => "stored",
            StoredOutcome::Duplicate => "duplicate",
            StoredOutcome::Processed => "processed",
            StoredOutcome::Retried => "retried",
            StoredOutcome::Failed => "failed",
            StoredOutcome::TakenOver => "taken_over",
        }
    }
}

/// A change an operator made to DLQ rows by hand (through the DLQ API), by the status it set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DlqManualAction {
    /// Rows deleted.
    Deleted,
    /// Rows sent back to the outbox (`TO_RETRY`).
    ToRetry,
    /// Rows marked handled (`RESOLVED`).
    Resolved,
    /// Rows set back to `MOVED`.
    Moved,
}

impl DlqManualAction {
    /// The metric label: `deleted`, `to_retry`, `resolved`, `moved`.
    pub fn as_str(self) -> &'static str {
        match self {
            DlqManualAction::Deleted => "deleted",
            DlqManualAction::ToRetry => "to_retry",
            DlqManualAction::Resolved => "resolved",
            DlqManualAction::Moved => "moved",
        }
    }
}

/// Recording hooks; every method has an empty default body.
pub trait OutboxMetrics: Send + Sync {
    /// A task run (a poll of an event type or a background job) starts.
    fn task_started(&self, _task: &str) {}
    /// A task run ended.
    fn task_finished(&self, _task: &str, _elapsed: Duration, _outcome: TaskOutcome) {}
    /// The delay before the task's next run changed.
    fn polling_delay(&self, _task: &str, _delay: Duration) {}
    /// Settled a batch of `event_type`.
    fn events_settled(&self, _event_type: &str, _delivered: u64, _retried: u64, _failed: u64) {}
    /// How long each event of `event_type` delivered in a batch waited between its commit (the
    /// database's `created_at`) and the broker's acknowledgement, measured when the batch settled.
    fn delivery_delays(&self, _event_type: &str, _delays: &[Duration]) {}
    /// Settles refused because the rows no longer held the batch's claim token.
    fn settles_refused(&self, _event_type: &str, _count: u64) {}
    /// A background job moved, recovered or deleted `count` rows (`job` is its task name).
    fn job_rows(&self, _job: &str, _count: u64) {}
    /// Inbox activity for `consumer`.
    fn inbox(&self, _consumer: &str, _outcome: InboxOutcome, _count: u64) {}
    /// A consumed-id cache lookup.
    fn cache_lookup(&self, _hit: bool) {}
    /// An operator changed `count` DLQ rows by hand.
    fn dlq_manual(&self, _action: DlqManualAction, _count: u64) {}
    /// A message of `consumer`'s durable inbox of `event_type` ended as `outcome`.
    fn stored_message(&self, _consumer: &str, _event_type: &str, _outcome: StoredOutcome) {}
    /// A durable inbox handler run took `elapsed` (its transaction's commit included).
    fn stored_handler_duration(&self, _consumer: &str, _event_type: &str, _elapsed: Duration) {}
    /// The time from an event's write (its `created_at`) to its effect's commit in a durable inbox.
    fn stored_latency(&self, _consumer: &str, _event_type: &str, _latency: Duration) {}
    /// How many messages of `consumer`'s durable inbox of `event_type` are in `status` now.
    fn stored_rows(
        &self,
        _consumer: &str,
        _event_type: &str,
        _status: crate::stored::InboxStatus,
        _rows: u64,
    ) {
    }
}

/// The default metrics hook: records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl OutboxMetrics for NoMetrics {}

/// An accelerator in front of the inbox table. The table's primary key stays authoritative: a
/// cache that fails should answer "not cached" (fail open to the database).
#[async_trait]
pub trait ConsumedCache: Send + Sync {
    /// Whether `(consumer, id)` is known to be consumed.
    async fn contains(&self, consumer: &str, id: Uuid) -> bool;
    /// Remembers `(consumer, id)` as consumed; called only after the consumption is durable.
    async fn insert(&self, consumer: &str, id: Uuid);
}

/// The default cache: remembers nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCache;

#[async_trait]
impl ConsumedCache for NoCache {
    async fn contains(&self, _consumer: &str, _id: Uuid) -> bool {
        false
    }

    async fn insert(&self, _consumer: &str, _id: Uuid) {}
}

/// Called after each committed transfer-to-DLQ batch with the rows that moved (e.g. to alert a
/// person). Errors are the handler's own business: it cannot undo the transfer.
#[async_trait]
pub trait DlqHandler: Send + Sync {
    /// The rows now waiting in the DLQ as MOVED.
    async fn handle(&self, moved: &[crate::event::OutboxEvent]);
}

/// The default DLQ handler: logs each moved id at error level.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogDlqHandler;

#[async_trait]
impl DlqHandler for LogDlqHandler {
    async fn handle(&self, moved: &[crate::event::OutboxEvent]) {
        for event in moved {
            tracing::error!(
                event_id = %event.id,
                event_type = %event.event_type,
                attempts = event.attempts,
                last_error = event.last_error.as_deref().unwrap_or(""),
                "event moved to the dead letter queue after exhausting its retries"
            );
        }
    }
}
