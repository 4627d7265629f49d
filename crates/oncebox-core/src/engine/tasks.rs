//! The bodies of the engine's tasks: one poller per event type and the background jobs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span, debug, debug_span, error, field, info_span, warn};
use uuid::Uuid;

use super::EngineStats;
use crate::config::{CleanUpConfig, EventConfig};
use crate::dao::{DlqDao, InboxDao, JobLock, OutboxDao};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{ClaimedBatch, OutboundMessage, Settlement};
use crate::hooks::{DlqHandler, OutboxMetrics};
use crate::polling::RunResult;
use crate::retry::{RetryDecision, decide};
use crate::sender::{Deadline, SendError, Sender, unanswered_as_timeouts};
use crate::trace;

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
    /// The span of one run: a [`JOB`](crate::trace::JOB) span named after the task; its `rows`
    /// field is recorded by [`full_if`].
    fn span(&self) -> Span {
        debug_span!("oncebox.job", job = %self.name(), rows = field::Empty)
    }
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
    /// Claim the next batch while sending the current one. Off when stuck recovery could take a
    /// batch that waits for the send before it: see [`claim_ahead_is_safe`].
    pub(crate) claim_ahead: bool,
    pub(crate) last_send_delivered: AtomicBool,
    pub(crate) stop_claiming: CancellationToken,
}

/// How many batches one run may claim before it gives its permit back to the other tasks.
const MAX_CLAIMS_PER_RUN: usize = 32;

/// A batch claimed ahead stays IN_PROCESS while the batch before it is sent (at most one
/// emergency timeout) and then through its own send (another), so stuck recovery must wait longer
/// than both, or it would hand a batch still waiting for its send to a second worker. The bound
/// holds because nothing else delays a batch claimed ahead: its claim starts together with the
/// send before it (so the database stamps its rows no earlier), and it never waits for a settle,
/// whose length has no bound (see [`EventPoller::run_once`]).
pub(crate) fn claim_ahead_is_safe(emergency_timeout: Duration, max_batch_processing_time: Duration) -> bool {
    emergency_timeout
        .checked_add(SEND_OVERRUN_GRACE)
        .and_then(|send| send.checked_mul(2))
        .is_some_and(|both| max_batch_processing_time > both)
}

/// How long after a send's deadline the engine still waits for the sender's answers. A sender
/// stops at the deadline itself; on a multi-threaded runtime the engine's timer can fire a moment
/// before the sender's, and without this grace the answers the sender had would be thrown away
/// (the acknowledged events sent again).
pub(crate) const SEND_OVERRUN_GRACE: Duration = Duration::from_secs(1);

impl EventPoller {
    async fn send_bounded(&self, messages: &[OutboundMessage]) -> Vec<Result<(), SendError>> {
        let span = info_span!(
            "oncebox.send",
            event_type = %self.event_type,
            messages = messages.len(),
            delivered = field::Empty,
            failed = field::Empty
        );
        for message in messages {
            trace::link_to(&span, &message.headers);
        }
        let results = self.send_within_deadline(messages).instrument(span.clone()).await;
        let delivered = results.iter().filter(|result| result.is_ok()).count();
        span.record("delivered", delivered).record("failed", results.len() - delivered);
        results
    }

    async fn send_within_deadline(&self, messages: &[OutboundMessage]) -> Vec<Result<(), SendError>> {
        let deadline = Deadline::after(self.emergency_timeout);
        // The engine's own bound, for a sender that ignores its deadline: only a sender that
        // overran it by more than the grace loses the answers it had.
        let bound = deadline.later_by(SEND_OVERRUN_GRACE);
        let Some(mut results) = bound.bound(self.sender.send(messages, deadline)).await else {
            warn!(event_type = %self.event_type, timeout = ?self.emergency_timeout, "send exceeded the emergency timeout");
            return unanswered_as_timeouts(
                messages.iter().map(|_| None).collect(),
                messages,
                &deadline,
                "acknowledged",
            );
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
        let settlements: Vec<Settlement> = batch
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
                            error!(
                                event_id = %event.id,
                                event_type = %self.event_type,
                                attempts,
                                %error,
                                "event not delivered after its last attempt: giving up, settling it as FAILED (the DLQ takes it when enabled)"
                            );
                            Settlement::Failed { id: event.id, error: error.to_string() }
                        }
                    }
                }
            })
            .collect();
        report_retries(&self.event_type, &settlements);
        (settlements, counts)
    }

    async fn settle_with_retries(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<()> {
        let span = info_span!(
            "oncebox.settle",
            event_type = %self.event_type,
            delivered = field::Empty,
            retried = field::Empty,
            failed = field::Empty,
            refused = field::Empty
        );
        let count = |kind: fn(&Settlement) -> bool| settlements.iter().filter(|s| kind(s)).count();
        span.record("delivered", count(|s| matches!(s, Settlement::Processed { .. })))
            .record("retried", count(|s| matches!(s, Settlement::Retry { .. })))
            .record("failed", count(|s| matches!(s, Settlement::Failed { .. })));
        self.settle_in_span(batch, settlements).instrument(span).await
    }

    async fn settle_in_span(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<()> {
        // A settle lost to a database blip would leave the batch IN_PROCESS until stuck recovery
        // re-sends it; a few quick retries avoid most of those duplicates.
        let mut delay = Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            match self.outbox.settle(batch, settlements).await {
                Ok(report) => {
                    Span::current().record("refused", report.refused);
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

/// One WARN line for the events of a batch that go back for a retry: how many, the first ids and
/// the first error. A broker that is down fails whole batches, and one line per event would bury
/// the log; each event's own error is in its `last_error` column.
fn report_retries(event_type: &str, settlements: &[Settlement]) {
    const SHOWN: usize = 5;
    let retried: Vec<(&Uuid, &str)> = settlements
        .iter()
        .filter_map(|settlement| match settlement {
            Settlement::Retry { id, error, .. } => Some((id, error.as_str())),
            _ => None,
        })
        .collect();
    let Some((_, first_error)) = retried.first() else { return };
    let event_ids: Vec<String> = retried.iter().take(SHOWN).map(|(id, _)| id.to_string()).collect();
    warn!(
        event_type,
        retried = retried.len(),
        event_ids = %event_ids.join(","),
        error = %first_error,
        "events not delivered; they are retried after their backoff"
    );
}

/// For each delivered event of `batch`, the time from its commit (`created_at`, the database's
/// clock) to now; a clock behind the database's gives zero, never a negative delay.
fn delivery_delays(batch: &ClaimedBatch, settlements: &[Settlement]) -> Vec<Duration> {
    let now = chrono::Utc::now();
    batch
        .events
        .iter()
        .zip(settlements)
        .filter(|(_, settlement)| matches!(settlement, Settlement::Processed { .. }))
        .map(|(event, _)| (now - event.created_at).to_std().unwrap_or_default())
        .collect()
}

/// Settles still running, in the order their batches were sent.
type Settling<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// A batch whose send finished, waiting for its settle.
struct SentBatch {
    batch: ClaimedBatch,
    settlements: Vec<Settlement>,
    counts: [u64; 3],
}

impl EventPoller {
    async fn claim(&self) -> Result<ClaimedBatch> {
        let batch = self
            .outbox
            .claim(&self.event_type, self.config.batch_size)
            .await
            .map_err(|e| e.context(format!("claiming {}", self.event_type)))?;
        self.stats.claimed.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(batch)
    }

    async fn settle_sent(&self, sent: Option<SentBatch>) -> Result<()> {
        let Some(SentBatch { batch, settlements, counts: [delivered, retried, failed] }) = sent else {
            return Ok(());
        };
        self.settle_with_retries(&batch, &settlements).await?;
        self.metrics.delivery_delays(&self.event_type, &delivery_delays(&batch, &settlements));
        self.stats.delivered.fetch_add(delivered, Ordering::Relaxed);
        self.stats.retried.fetch_add(retried, Ordering::Relaxed);
        self.stats.failed.fetch_add(failed, Ordering::Relaxed);
        self.metrics.events_settled(&self.event_type, delivered, retried, failed);
        Ok(())
    }

    /// Settles `sent` after `overdue` (a settle that outlasted the batch it ran beside), so at
    /// most one settle of this type runs at a time. Every batch is settled even when an earlier
    /// settle failed; the first error is returned.
    fn settle_after<'a>(&'a self, overdue: Option<Settling<'a>>, sent: Option<SentBatch>) -> Settling<'a> {
        Box::pin(async move {
            let earlier = match overdue {
                Some(overdue) => overdue.await,
                None => Ok(()),
            };
            let this = self.settle_sent(sent).await;
            earlier.and(this)
        })
    }

    /// Whether the batch after `batch` may be claimed while `batch` is being sent.
    fn may_claim_ahead(&self, batch: &ClaimedBatch, claims: usize) -> bool {
        self.claim_ahead
            && batch.len() == self.config.batch_size as usize
            && claims < MAX_CLAIMS_PER_RUN
            && self.last_send_delivered.load(Ordering::Relaxed)
            && !self.stop_claiming.is_cancelled()
    }
}

#[async_trait]
impl TaskBody for EventPoller {
    fn name(&self) -> &str {
        &self.event_type
    }

    /// A [`POLL`](crate::trace::POLL) span; `claimed` counts the rows of every batch of the run.
    fn span(&self) -> Span {
        debug_span!("oncebox.poll", event_type = %self.event_type, claimed = field::Empty)
    }

    /// Drains while batches come back full, as a three-stage pipeline: batch n is sent while
    /// batch n+1 is claimed and batch n-1 is settled. Sends never overlap, so the broker sees
    /// events in claim order, as with a sequential drain. Every claimed batch is sent and settled
    /// before the run returns, even after an error, so nothing waits for stuck recovery.
    ///
    /// A batch claimed ahead waits only for the send before it, never for a settle: a settle is
    /// retried and each attempt lasts as long as the database takes, so waiting for it could keep
    /// the claimed batch unsent past `max-batch-processing-time`, and stuck recovery would hand it
    /// to a second worker. A settle that outlasts the send and the claim beside it keeps running
    /// beside the next send, and no further batch is claimed ahead until it has finished.
    async fn run_once(&self) -> Result<RunOutcome> {
        let first = self.claim().await?;
        let mut claimed = first.len();
        Span::current().record("claimed", claimed);
        if first.is_empty() {
            return Ok(RunOutcome::Ran(RunResult::Short));
        }
        let mut claims = 1;
        let mut current = Some(first);
        let mut sent = None;
        let mut overdue: Option<Settling<'_>> = None;
        let mut first_error = None;
        let mut more_waiting = false;
        let mut delivered_any = false;
        while let Some(batch) = current.take() {
            // While a settle is overdue the database is slow: claiming more would only add
            // batches waiting for it.
            let claim_ahead =
                first_error.is_none() && overdue.is_none() && self.may_claim_ahead(&batch, claims);
            let messages: Vec<OutboundMessage> =
                batch.events.iter().map(|event| event.to_message(&self.config.topic)).collect();
            let mut settling = self.settle_after(overdue.take(), sent.take());
            let send_and_claim = async {
                tokio::join!(self.send_bounded(&messages), async {
                    if claim_ahead { Some(self.claim().await) } else { None }
                })
            };
            tokio::pin!(send_and_claim);
            let mut settled = None;
            let (results, next) = loop {
                tokio::select! {
                    done = &mut send_and_claim => break done,
                    result = &mut settling, if settled.is_none() => settled = Some(result),
                }
            };
            match next {
                Some(Ok(next)) if !next.is_empty() => {
                    claims += 1;
                    claimed += next.len();
                    current = Some(next);
                }
                Some(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                _ => {}
            }
            let settled = match settled {
                Some(result) => Some(result),
                // The batch claimed ahead goes out now; the settle finishes beside its send.
                None if current.is_some() => {
                    overdue = Some(settling);
                    None
                }
                None => Some(settling.await),
            };
            if let Some(Err(error)) = settled {
                first_error.get_or_insert(error);
            }
            let (settlements, counts) = self.settlements(&batch, results);
            // Drain only while the broker takes events: a full batch of failures must not re-poll
            // at once against a broker that is down.
            let delivered = counts[0] > 0;
            self.last_send_delivered.store(delivered, Ordering::Relaxed);
            more_waiting = delivered && batch.len() == self.config.batch_size as usize;
            delivered_any |= delivered;
            sent = Some(SentBatch { batch, settlements, counts });
        }
        let settled = self.settle_after(overdue.take(), sent).await;
        Span::current().record("claimed", claimed);
        if let Some(error) = first_error {
            return Err(error);
        }
        settled?;
        Ok(RunOutcome::Ran(if more_waiting {
            RunResult::Full
        } else if delivered_any && self.last_send_delivered.load(Ordering::Relaxed) {
            RunResult::Partial
        } else {
            RunResult::Short
        }))
    }
}

fn full_if(count: u64, batch_size: u32) -> RunOutcome {
    Span::current().record("rows", count);
    RunOutcome::Ran(if count >= u64::from(batch_size) { RunResult::Full } else { RunResult::Short })
}

/// Returns rows stuck IN_PROCESS to PENDING.
pub(crate) struct StuckRecovery {
    pub(crate) outbox: Arc<dyn OutboxDao>,
    pub(crate) older_than: Duration,
    pub(crate) max_recoveries: u32,
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
        let recovered =
            self.outbox.recover_stuck(self.older_than, self.max_recoveries, self.batch_size).await?;
        if recovered > 0 {
            warn!(
                recovered,
                max_recoveries = self.max_recoveries,
                "returned events stuck IN_PROCESS to PENDING, or to FAILED when recovered max-recoveries times"
            );
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
