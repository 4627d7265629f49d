//! The bodies of the engine's tasks: one poller per event type and the background jobs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use tracing::{debug, warn};
use uuid::Uuid;

use super::EngineStats;
use crate::config::{CleanUpConfig, EventConfig};
use crate::dao::{DlqDao, InboxDao, JobLock, OutboxDao};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{ClaimedBatch, OutboundMessage, Settlement};
use crate::hooks::{DlqHandler, OutboxMetrics};
use crate::polling::RunResult;
use crate::retry::{RetryDecision, decide};
use crate::sender::{SendError, Sender};

/// How a task run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    /// The run did its work; `Full` when more is likely waiting.
    Ran(RunResult),
    /// Another instance holds the job's lock.
    Skipped,
}

/// One schedulable unit of work.
#[async_trait]
pub(crate) trait TaskBody: Send + Sync {
    /// Name used in logs and metrics (the event type, or the job's name).
    fn name(&self) -> &str;
    /// One run.
    async fn run_once(&self) -> Result<RunOutcome>;
}

/// Claims, sends and settles batches of one event type.
pub(crate) struct EventPoller {
    pub(crate) event_type: String,
    pub(crate) config: EventConfig,
    pub(crate) emergency_timeout: Duration,
    pub(crate) outbox: Arc<dyn OutboxDao>,
    pub(crate) sender: Arc<dyn Sender>,
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
    pub(crate) stats: Arc<EngineStats>,
}

impl EventPoller {
    async fn send_bounded(&self, messages: &[OutboundMessage]) -> Vec<Result<(), SendError>> {
        let mut results = match tokio::time::timeout(self.emergency_timeout, self.sender.send(messages)).await
        {
            Ok(results) => results,
            Err(_) => {
                warn!(event_type = %self.event_type, timeout = ?self.emergency_timeout, "send exceeded the emergency timeout");
                return messages
                    .iter()
                    .map(|_| {
                        Err(Error::temporary(
                            ErrorKind::Timeout,
                            format!(
                                "no acknowledgement within the emergency timeout of {:?}",
                                self.emergency_timeout
                            ),
                        ))
                    })
                    .collect();
            }
        };
        if results.len() != messages.len() {
            warn!(
                event_type = %self.event_type,
                expected = messages.len(),
                got = results.len(),
                "sender returned the wrong number of results; unanswered events count as failed"
            );
            results.truncate(messages.len());
            while results.len() < messages.len() {
                results
                    .push(Err(Error::temporary(ErrorKind::Broker, "sender gave no result for this event")));
            }
        }
        results
    }

    fn settlements(
        &self,
        batch: &ClaimedBatch,
        results: Vec<Result<(), SendError>>,
    ) -> (Vec<Settlement>, [u64; 3]) {
        let mut counts = [0u64; 3];
        let settlements = batch
            .events
            .iter()
            .zip(results)
            .map(|(event, result)| match result {
                Ok(()) => {
                    counts[0] += 1;
                    Settlement::Processed { id: event.id }
                }
                Err(error) => {
                    let attempts = event.attempts.saturating_add(1);
                    match decide(attempts, self.config.max_retries, &self.config.backoff) {
                        RetryDecision::RetryAfter(delay) => {
                            counts[1] += 1;
                            Settlement::Retry { id: event.id, delay, error: error.to_string() }
                        }
                        RetryDecision::GiveUp => {
                            counts[2] += 1;
                            Settlement::Failed { id: event.id, error: error.to_string() }
                        }
                    }
                }
            })
            .collect();
        (settlements, counts)
    }

    async fn settle_with_retries(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<()> {
        // A settle lost to a database blip would leave the batch IN_PROCESS until stuck recovery
        // re-sends it; a few quick retries avoid most of those duplicates.
        let mut delay = Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            match self.outbox.settle(batch, settlements).await {
                Ok(report) => {
                    if report.refused > 0 {
                        warn!(
                            event_type = %self.event_type,
                            refused = report.refused,
                            claim_token = %batch.claim_token,
                            "settles refused: rows were recovered as stuck and claimed again by another worker"
                        );
                        self.stats.refused_settles.fetch_add(report.refused, Ordering::Relaxed);
                        self.metrics.settles_refused(&self.event_type, report.refused);
                    }
                    return Ok(());
                }
                Err(error) if error.is_temporary() && attempt < 4 => {
                    debug!(event_type = %self.event_type, %error, attempt, "settle failed, retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                    attempt += 1;
                }
                Err(error) => return Err(error.context(format!("settling a batch of {}", self.event_type))),
            }
        }
    }
}

#[async_trait]
impl TaskBody for EventPoller {
    fn name(&self) -> &str {
        &self.event_type
    }

    async fn run_once(&self) -> Result<RunOutcome> {
        let batch = self
            .outbox
            .claim(&self.event_type, self.config.batch_size)
            .await
            .map_err(|e| e.context(format!("claiming {}", self.event_type)))?;
        if batch.is_empty() {
            return Ok(RunOutcome::Ran(RunResult::Short));
        }
        self.stats.claimed.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let messages: Vec<OutboundMessage> =
            batch.events.iter().map(|event| event.to_message(&self.config.topic)).collect();
        let results = self.send_bounded(&messages).await;
        let (settlements, [delivered, retried, failed]) = self.settlements(&batch, results);
        self.settle_with_retries(&batch, &settlements).await?;
        self.stats.delivered.fetch_add(delivered, Ordering::Relaxed);
        self.stats.retried.fetch_add(retried, Ordering::Relaxed);
        self.stats.failed.fetch_add(failed, Ordering::Relaxed);
        self.metrics.events_settled(&self.event_type, delivered, retried, failed);
        // Drain only while the broker takes events: a full batch of failures must not re-poll at
        // once against a broker that is down.
        let full = batch.len() == self.config.batch_size as usize && delivered > 0;
        Ok(RunOutcome::Ran(if full { RunResult::Full } else { RunResult::Short }))
    }
}

fn full_if(count: u64, batch_size: u32) -> RunOutcome {
    RunOutcome::Ran(if count >= u64::from(batch_size) { RunResult::Full } else { RunResult::Short })
}

/// Returns rows stuck IN_PROCESS to PENDING.
pub(crate) struct StuckRecovery {
    pub(crate) outbox: Arc<dyn OutboxDao>,
    pub(crate) older_than: Duration,
    pub(crate) batch_size: u32,
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
    pub(crate) stats: Arc<EngineStats>,
}

#[async_trait]
impl TaskBody for StuckRecovery {
    fn name(&self) -> &str {
        JOB_STUCK_RECOVERY
    }

    async fn run_once(&self) -> Result<RunOutcome> {
        let recovered = self.outbox.recover_stuck(self.older_than, self.batch_size).await?;
        if recovered > 0 {
            warn!(recovered, "returned events stuck IN_PROCESS to PENDING");
            self.stats.recovered.fetch_add(recovered, Ordering::Relaxed);
            self.metrics.job_rows(JOB_STUCK_RECOVERY, recovered);
        }
        Ok(full_if(recovered, self.batch_size))
    }
}

/// What a locked clean-up deletes.
pub(crate) enum CleanUpTarget {
    Processed(Arc<dyn OutboxDao>),
    ResolvedDlq(Arc<dyn DlqDao>),
    Consumed(Arc<dyn InboxDao>),
}

/// A clean-up run under a job lock, so only one instance deletes at a time.
pub(crate) struct LockedCleanUp {
    pub(crate) job: &'static str,
    pub(crate) target: CleanUpTarget,
    pub(crate) config: CleanUpConfig,
    pub(crate) lock: Arc<dyn JobLock>,
    pub(crate) owner: Uuid,
    pub(crate) lock_durations: (Duration, Duration),
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
}

impl LockedCleanUp {
    async fn delete(&self) -> Result<u64> {
        let CleanUpConfig { ttl, batch_size, .. } = self.config;
        match &self.target {
            CleanUpTarget::Processed(outbox) => outbox.delete_processed(ttl, batch_size).await,
            CleanUpTarget::ResolvedDlq(dlq) => dlq.delete_resolved(ttl, batch_size).await,
            CleanUpTarget::Consumed(inbox) => inbox.delete_older_than(ttl, batch_size).await,
        }
    }
}

#[async_trait]
impl TaskBody for LockedCleanUp {
    fn name(&self) -> &str {
        self.job
    }

    async fn run_once(&self) -> Result<RunOutcome> {
        let (at_least, at_most) = self.lock_durations;
        let Some(lease) = self.lock.try_lock(self.job, self.owner, at_least, at_most).await? else {
            return Ok(RunOutcome::Skipped);
        };
        let deleted = self.delete().await;
        // Release even when the delete failed, so the next run (here or elsewhere) is not held off
        // for lock-at-most-for.
        let released = self.lock.unlock(&lease).await;
        let deleted = deleted?;
        released?;
        if deleted > 0 {
            debug!(job = self.job, deleted, "clean-up deleted rows");
            self.metrics.job_rows(self.job, deleted);
        }
        Ok(full_if(deleted, self.config.batch_size))
    }
}

/// FAILED outbox rows → DLQ, then the handler.
pub(crate) struct TransferToDlq {
    pub(crate) dlq: Arc<dyn DlqDao>,
    pub(crate) batch_size: u32,
    pub(crate) handler: Arc<dyn DlqHandler>,
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
    pub(crate) stats: Arc<EngineStats>,
}

#[async_trait]
impl TaskBody for TransferToDlq {
    fn name(&self) -> &str {
        JOB_TRANSFER_TO_DLQ
    }

    async fn run_once(&self) -> Result<RunOutcome> {
        let moved = self.dlq.transfer_to_dlq(self.batch_size).await?;
        if !moved.is_empty() {
            self.stats.moved_to_dlq.fetch_add(moved.len() as u64, Ordering::Relaxed);
            self.metrics.job_rows(JOB_TRANSFER_TO_DLQ, moved.len() as u64);
            self.handler.handle(&moved).await;
        }
        Ok(full_if(moved.len() as u64, self.batch_size))
    }
}

/// TO_RETRY DLQ rows → outbox as PENDING.
pub(crate) struct TransferFromDlq {
    pub(crate) dlq: Arc<dyn DlqDao>,
    pub(crate) batch_size: u32,
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
    pub(crate) wake_all: Arc<dyn Fn() + Send + Sync>,
}

#[async_trait]
impl TaskBody for TransferFromDlq {
    fn name(&self) -> &str {
        JOB_TRANSFER_FROM_DLQ
    }

    async fn run_once(&self) -> Result<RunOutcome> {
        let moved = self.dlq.transfer_from_dlq(self.batch_size).await?;
        if moved > 0 {
            self.metrics.job_rows(JOB_TRANSFER_FROM_DLQ, moved);
            (self.wake_all)();
        }
        Ok(full_if(moved, self.batch_size))
    }
}

/// Task name of stuck recovery.
pub const JOB_STUCK_RECOVERY: &str = "stuck-event-recovery";
/// Task and lock name of the processed clean-up.
pub const JOB_CLEANUP_PROCESSED: &str = "cleanup-processed-events";
/// Task name of the transfer to the DLQ.
pub const JOB_TRANSFER_TO_DLQ: &str = "transfer-to-dlq";
/// Task name of the transfer from the DLQ.
pub const JOB_TRANSFER_FROM_DLQ: &str = "transfer-from-dlq";
/// Task and lock name of the resolved-DLQ clean-up.
pub const JOB_CLEANUP_DLQ: &str = "cleanup-resolved-dlq-events";
/// Task and lock name of the inbox clean-up.
pub const JOB_CLEANUP_CONSUMED: &str = "cleanup-consumed-events";
