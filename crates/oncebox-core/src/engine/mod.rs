//! The relay engine: one poller per event type plus the background jobs, each on its own
//! schedule, bounded together by `thread-pool-size`, with a lifecycle and graceful shutdown.

mod tasks;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, warn};
use uuid::Uuid;

use tasks::{
    CleanUpTarget, EventPoller, LockedCleanUp, RunOutcome, StuckRecovery, TaskBody, TransferFromDlq,
    TransferToDlq,
};
pub use tasks::{
    JOB_CLEANUP_CONSUMED, JOB_CLEANUP_DLQ, JOB_CLEANUP_PROCESSED, JOB_STUCK_RECOVERY, JOB_TRANSFER_FROM_DLQ,
    JOB_TRANSFER_TO_DLQ,
};

use crate::activity::{PollerActivity, WAKE_GRACE};
use crate::config::{CleanUpConfig, Config, DlqConfig, OutboxConfig, Polling};
use crate::dao::{Dialect, DlqDao, InboxDao, JobLock, OutboxDao, WakeSource, WakeUp};
use crate::error::{Error, ErrorKind, Result};
use crate::hooks::{DlqHandler, LogDlqHandler, NoMetrics, OutboxMetrics, TaskOutcome};
use crate::polling::{RunResult, Schedule};
use crate::sender::Sender;

/// The engine's state: `Stopped → Starting → Running (or Idle) → Stopping → Stopped`, and
/// `Failed` when a task loop dies. It is never `Running` while no task is scheduled.
///
/// Non-exhaustive: a health check should match the states it accepts (`Running`, `Idle`) and treat
/// any other as unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifecycle {
    /// Not started, or shut down.
    Stopped,
    /// Tasks are being scheduled.
    Starting,
    /// Every task is scheduled, and there is at least one: a poller or a background job.
    Running,
    /// Started with nothing to run in the background: no event type and no job is configured, as
    /// in a consumer-only service with the inbox clean-up off. The inbox (and a publisher, if
    /// any) work; reporting `Running` would claim background work that does not exist.
    Idle,
    /// Shutting down: no new claims; in-flight batches settle.
    Stopping,
    /// A task loop died; the reason says which. Other tasks keep running until shutdown.
    Failed(String),
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lifecycle::Stopped => f.write_str("stopped"),
            Lifecycle::Starting => f.write_str("starting"),
            Lifecycle::Running => f.write_str("running"),
            Lifecycle::Idle => f.write_str("idle"),
            Lifecycle::Stopping => f.write_str("stopping"),
            Lifecycle::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// Running totals since start.
#[derive(Debug, Default)]
pub struct EngineStats {
    claimed: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    refused_settles: AtomicU64,
    recovered: AtomicU64,
    moved_to_dlq: AtomicU64,
    task_errors: AtomicU64,
}

/// A copy of [`EngineStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Rows claimed.
    pub claimed: u64,
    /// Events the broker acknowledged. A settle refused by fencing still counts: the broker has
    /// the event, and the newer claimer settles the row.
    pub delivered: u64,
    /// Failed sends scheduled for a retry.
    pub retried: u64,
    /// Events marked FAILED after their last retry.
    pub failed: u64,
    /// Settles refused because another worker had re-claimed the rows (fencing at work).
    pub refused_settles: u64,
    /// Rows returned from IN_PROCESS by stuck recovery.
    pub recovered: u64,
    /// Rows moved to the DLQ.
    pub moved_to_dlq: u64,
    /// Task runs that returned an error.
    pub task_errors: u64,
}

impl EngineStats {
    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            claimed: self.claimed.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            refused_settles: self.refused_settles.load(Ordering::Relaxed),
            recovered: self.recovered.load(Ordering::Relaxed),
            moved_to_dlq: self.moved_to_dlq.load(Ordering::Relaxed),
            task_errors: self.task_errors.load(Ordering::Relaxed),
        }
    }
}

/// Everything the engine runs with. The facade fills it from a dialect and a sender.
pub struct EngineParts {
    /// Validated configuration.
    pub config: Config,
    /// Outbox DAO (needed when `config.outbox` is set).
    pub outbox: Option<Arc<dyn OutboxDao>>,
    /// DLQ DAO (needed when the DLQ is enabled).
    pub dlq: Option<Arc<dyn DlqDao>>,
    /// Inbox DAO (needed for the inbox clean-up).
    pub inbox: Option<Arc<dyn InboxDao>>,
    /// Job lock for the clean-ups.
    pub job_lock: Option<Arc<dyn JobLock>>,
    /// The transport (needed when `config.outbox` is set).
    pub sender: Option<Arc<dyn Sender>>,
    /// Metrics hook.
    pub metrics: Arc<dyn OutboxMetrics>,
    /// Called after each committed transfer to the DLQ.
    pub dlq_handler: Arc<dyn DlqHandler>,
    /// Wake-up hints from the database.
    pub wake_source: Option<Box<dyn WakeSource>>,
    /// The awake marks the dialect's writer reads to leave out wake-ups the pollers do not need
    /// ([`Dialect::poller_activity`]); only with a wake source.
    pub activity: Option<Arc<PollerActivity>>,
    /// This instance's id (job lock owner).
    pub worker_id: Uuid,
}

impl EngineParts {
    /// Parts with no-op hooks and nothing attached yet.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            outbox: None,
            dlq: None,
            inbox: None,
            job_lock: None,
            sender: None,
            metrics: Arc::new(NoMetrics),
            dlq_handler: Arc::new(LogDlqHandler),
            wake_source: None,
            activity: None,
            worker_id: Uuid::new_v4(),
        }
    }

    /// Parts with every DAO of `dialect` and its job lock attached, for code that assembles an
    /// engine by hand (tests, benchmarks); the facade's builder attaches only what the schema plan
    /// asks for, and adds the wake-up source.
    pub fn with_dialect(config: Config, dialect: &impl Dialect) -> Self {
        let daos = dialect.daos();
        let mut parts = Self::new(config);
        parts.outbox = Some(daos.outbox);
        parts.dlq = Some(daos.dlq);
        parts.inbox = Some(daos.inbox);
        parts.job_lock = Some(daos.job_lock);
        parts
    }
}

/// Cuts the sleep of event pollers short.
#[derive(Clone, Default)]
pub struct Wakers {
    by_type: Arc<HashMap<String, Arc<Notify>>>,
}

impl Wakers {
    fn new<'a>(event_types: impl Iterator<Item = &'a String>) -> Self {
        Self { by_type: Arc::new(event_types.map(|t| (t.clone(), Arc::new(Notify::new()))).collect()) }
    }

    /// Wakes the poller of `event_type`; `false` if no such poller exists. A wake that arrives
    /// while the poller is busy makes its next sleep end at once.
    pub fn wake(&self, event_type: &str) -> bool {
        match self.by_type.get(event_type) {
            Some(notify) => {
                notify.notify_one();
                true
            }
            None => false,
        }
    }

    /// Wakes every poller.
    pub fn wake_all(&self) {
        self.by_type.values().for_each(|notify| notify.notify_one());
    }

    fn get(&self, event_type: &str) -> Option<Arc<Notify>> {
        self.by_type.get(event_type).cloned()
    }
}

struct Shared {
    state: watch::Sender<Lifecycle>,
    stop_claiming: CancellationToken,
    abort: CancellationToken,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<EngineStats>,
    wakers: Wakers,
    sender: Option<Arc<dyn Sender>>,
}

/// A running engine. Cloning gives another handle to the same engine.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineHandle").field("state", &self.state()).finish_non_exhaustive()
    }
}

struct TaskSpec {
    body: Arc<dyn TaskBody>,
    polling: Polling,
    wake: Option<Arc<Notify>>,
    /// An event poller's awake mark (see [`crate::activity`]).
    awake: Option<Arc<AtomicBool>>,
}

/// Starts engines.
pub struct Engine;

impl Engine {
    /// Validates the parts against the configuration and spawns every task on the current tokio
    /// runtime. The handle reports [`Lifecycle::Running`] once all tasks are scheduled, or
    /// [`Lifecycle::Idle`] when the configuration has none (an inbox without clean-up). A
    /// configuration with neither `oncebox.outbox` nor `oncebox.inbox` is refused: such an engine
    /// could do nothing at all, which is a mistake in the configuration rather than a service.
    pub fn start(parts: EngineParts) -> Result<EngineHandle> {
        let (state, _) = watch::channel(Lifecycle::Starting);
        let config = &parts.config;
        if config.outbox.is_none() && config.inbox.is_none() {
            return Err(Error::new(
                ErrorKind::Lifecycle,
                "cannot start: neither oncebox.outbox nor oncebox.inbox is configured, so there is nothing to run",
            ));
        }
        let event_types: Vec<String> =
            config.outbox.as_ref().map(|o| o.events.keys().cloned().collect()).unwrap_or_default();
        let wakers = Wakers::new(event_types.iter());
        let stats = Arc::new(EngineStats::default());
        let stop_claiming = CancellationToken::new();
        let specs = Self::task_specs(&parts, &wakers, &stats, &stop_claiming)?;

        let shared = Arc::new(Shared {
            state,
            stop_claiming,
            abort: CancellationToken::new(),
            supervisor: Mutex::new(None),
            stats: stats.clone(),
            wakers: wakers.clone(),
            sender: parts.sender.clone(),
        });
        let permits = Arc::new(Semaphore::new(config.thread_pool_size));
        let mut tasks = JoinSet::new();
        let task_count = specs.len();
        for spec in specs {
            let context = LoopContext {
                stop: shared.stop_claiming.clone(),
                permits: permits.clone(),
                metrics: parts.metrics.clone(),
                stats: stats.clone(),
            };
            let name = spec.body.name().to_owned();
            tasks.spawn(async move {
                task_loop(spec, context).await;
                name
            });
        }
        if let Some(source) = parts.wake_source {
            let wakers = wakers.clone();
            let stop = shared.stop_claiming.clone();
            tokio::spawn(forward_wake_ups(source, wakers, stop));
        }
        let supervisor = tokio::spawn(supervise(tasks, shared.clone()));
        if let Ok(mut slot) = shared.supervisor.lock() {
            *slot = Some(supervisor);
        }
        // Running promises scheduled work; with no task at all the honest state is Idle.
        let started = if task_count == 0 { Lifecycle::Idle } else { Lifecycle::Running };
        shared.state.send_if_modified(|state| {
            if *state == Lifecycle::Starting {
                *state = started.clone();
                true
            } else {
                false
            }
        });
        if task_count == 0 {
            info!("oncebox engine idle: no event type and no background job is configured");
        } else {
            info!(tasks = task_count, event_types = event_types.len(), "oncebox engine running");
        }
        Ok(EngineHandle { shared })
    }

    fn task_specs(
        parts: &EngineParts,
        wakers: &Wakers,
        stats: &Arc<EngineStats>,
        stop_claiming: &CancellationToken,
    ) -> Result<Vec<TaskSpec>> {
        let assembly = Assembly { parts, wakers, stats, stop_claiming };
        let mut specs = Vec::new();
        if let Some(outbox_config) = &parts.config.outbox {
            specs.extend(assembly.outbox_tasks(outbox_config)?);
        }
        if let Some(clean_up) = parts.config.inbox.as_ref().and_then(|inbox| inbox.clean_up) {
            let inbox =
                assembly.part(&parts.inbox, "oncebox.inbox is configured but no inbox DAO was given")?;
            specs.push(assembly.clean_up(
                JOB_CLEANUP_CONSUMED,
                "oncebox.inbox.clean-up",
                CleanUpTarget::Consumed(inbox),
                clean_up,
            )?);
        }
        // Last, so a start that fails on a missing part changes nothing in the sender.
        if let (Some(outbox_config), Some(sender)) = (&parts.config.outbox, &parts.sender) {
            sender.adopt_emergency_timeout(outbox_config.emergency_timeout)?;
        }
        Ok(specs)
    }
}

/// What the tasks of one engine are made from; each step builds the tasks of one area and names
/// the part it misses.
struct Assembly<'a> {
    parts: &'a EngineParts,
    wakers: &'a Wakers,
    stats: &'a Arc<EngineStats>,
    stop_claiming: &'a CancellationToken,
}

impl Assembly<'_> {
    /// `part`, or a start error saying which configured feature needs it.
    fn part<T: ?Sized>(&self, part: &Option<Arc<T>>, missing: &str) -> Result<Arc<T>> {
        part.clone().ok_or_else(|| Error::new(ErrorKind::Lifecycle, format!("cannot start: {missing}")))
    }

    /// `concurrency` pollers per event type, stuck recovery, the processed clean-up and the DLQ's tasks.
    fn outbox_tasks(&self, config: &OutboxConfig) -> Result<Vec<TaskSpec>> {
        let outbox =
            self.part(&self.parts.outbox, "oncebox.outbox is configured but no outbox DAO was given")?;
        let sender = self.part(&self.parts.sender, "oncebox.outbox is configured but no sender was given")?;
        let claim_ahead = tasks::claim_ahead_is_safe(
            config.emergency_timeout,
            config.stuck_recovery.max_batch_processing_time,
        );
        if !claim_ahead {
            info!(
                "claiming ahead is off: stuck-recovery.max-batch-processing-time is not longer than twice \
                 sender.emergency-timeout; each batch is claimed after the previous one was sent"
            );
        }
        // `concurrency` loops per type, each an independent poller (its own schedule and
        // pipeline) sharing the type's wake-up, which wakes one of them, and its awake mark,
        // which every loop that clears it follows with its own grace claim.
        let mut specs: Vec<TaskSpec> = config
            .events
            .iter()
            .flat_map(|(event_type, event_config)| {
                (0..event_config.concurrency).map(move |_| (event_type, event_config))
            })
            .map(|(event_type, event_config)| TaskSpec {
                body: Arc::new(EventPoller {
                    event_type: event_type.clone(),
                    config: event_config.clone(),
                    emergency_timeout: config.emergency_timeout,
                    outbox: outbox.clone(),
                    sender: sender.clone(),
                    metrics: self.parts.metrics.clone(),
                    stats: self.stats.clone(),
                    claim_ahead,
                    last_send_delivered: AtomicBool::new(true),
                    stop_claiming: self.stop_claiming.clone(),
                }),
                polling: event_config.polling,
                wake: self.wakers.get(event_type),
                awake: self
                    .parts
                    .activity
                    .as_ref()
                    .filter(|_| self.parts.wake_source.is_some())
                    .and_then(|activity| activity.mark(event_type)),
            })
            .collect();
        let stuck = config.stuck_recovery;
        specs.push(TaskSpec {
            body: Arc::new(StuckRecovery {
                outbox: outbox.clone(),
                older_than: stuck.max_batch_processing_time,
                max_recoveries: stuck.max_recoveries,
                batch_size: stuck.batch_size,
                metrics: self.parts.metrics.clone(),
                stats: self.stats.clone(),
            }),
            polling: stuck.polling,
            wake: None,
            awake: None,
        });
        if let Some(clean_up) = config.clean_up {
            specs.push(self.clean_up(
                JOB_CLEANUP_PROCESSED,
                "oncebox.outbox.clean-up",
                CleanUpTarget::Processed(outbox),
                clean_up,
            )?);
        }
        if let Some(dlq_config) = &config.dlq {
            specs.extend(self.dlq_tasks(dlq_config)?);
        }
        Ok(specs)
    }

    /// The transfers to and from the DLQ, and its clean-up.
    fn dlq_tasks(&self, config: &DlqConfig) -> Result<Vec<TaskSpec>> {
        let dlq = self.part(&self.parts.dlq, "oncebox.outbox.dlq is enabled but no DLQ DAO was given")?;
        let wakers = self.wakers.clone();
        let mut specs = vec![
            TaskSpec {
                body: Arc::new(TransferToDlq {
                    dlq: dlq.clone(),
                    batch_size: config.transfer_to.batch_size,
                    handler: self.parts.dlq_handler.clone(),
                    metrics: self.parts.metrics.clone(),
                    stats: self.stats.clone(),
                }),
                polling: config.transfer_to.polling,
                wake: None,
                awake: None,
            },
            TaskSpec {
                body: Arc::new(TransferFromDlq {
                    dlq: dlq.clone(),
                    batch_size: config.transfer_from.batch_size,
                    metrics: self.parts.metrics.clone(),
                    wake_all: Arc::new(move || wakers.wake_all()),
                }),
                polling: config.transfer_from.polling,
                wake: None,
                awake: None,
            },
        ];
        if let Some(clean_up) = config.clean_up {
            specs.push(self.clean_up(
                JOB_CLEANUP_DLQ,
                "oncebox.outbox.dlq.clean-up",
                CleanUpTarget::ResolvedDlq(dlq),
                clean_up,
            )?);
        }
        Ok(specs)
    }

    /// A clean-up job under the job lock; `key` names the setting that asked for it.
    fn clean_up(
        &self,
        job: &'static str,
        key: &str,
        target: CleanUpTarget,
        config: CleanUpConfig,
    ) -> Result<TaskSpec> {
        let lock = self.part(&self.parts.job_lock, &format!("{key} needs a job lock"))?;
        Ok(TaskSpec {
            body: Arc::new(LockedCleanUp {
                job,
                target,
                config,
                lock,
                owner: self.parts.worker_id,
                lock_durations: self.parts.config.distributed_lock.durations_for(&config.polling),
                metrics: self.parts.metrics.clone(),
            }),
            polling: config.polling,
            wake: None,
            awake: None,
        })
    }
}

struct LoopContext {
    stop: CancellationToken,
    permits: Arc<Semaphore>,
    metrics: Arc<dyn OutboxMetrics>,
    stats: Arc<EngineStats>,
}

/// Sleeps `delay`; returns false when the engine is stopping. A wake-up ends the sleep early.
async fn sleep_or_wake(delay: Duration, wake: Option<&Notify>, stop: &CancellationToken) -> bool {
    if delay.is_zero() {
        return !stop.is_cancelled();
    }
    let woken = async {
        match wake {
            Some(notify) => notify.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = stop.cancelled() => false,
        _ = woken => true,
        _ = tokio::time::sleep(delay) => true,
    }
}

async fn task_loop(spec: TaskSpec, context: LoopContext) {
    let name = spec.body.name().to_owned();
    let mut schedule = Schedule::new(spec.polling);
    let mut delay = schedule.initial_delay();
    let mut schedule_delay = delay;
    loop {
        if !sleep_or_wake(delay, spec.wake.as_deref(), &context.stop).await {
            break;
        }
        let permit = tokio::select! {
            biased;
            _ = context.stop.cancelled() => break,
            permit = context.permits.acquire() => permit,
        };
        let Ok(_permit) = permit else { break };
        context.metrics.task_started(&name);
        let started = Instant::now();
        let outcome = spec.body.run_once().instrument(spec.body.span()).await;
        let elapsed = started.elapsed();
        let result = match outcome {
            Ok(RunOutcome::Ran(result)) => {
                context.metrics.task_finished(
                    &name,
                    elapsed,
                    TaskOutcome::Succeeded { full: result == RunResult::Full },
                );
                result
            }
            Ok(RunOutcome::Skipped) => {
                context.metrics.task_finished(&name, elapsed, TaskOutcome::Skipped);
                RunResult::Short
            }
            Err(error) => {
                context.stats.task_errors.fetch_add(1, Ordering::Relaxed);
                context.metrics.task_finished(&name, elapsed, TaskOutcome::Failed);
                warn!(task = %name, %error, "task run failed; it will run again on its schedule");
                RunResult::Short
            }
        };
        let next = schedule.next_delay(result);
        if next != schedule_delay {
            context.metrics.polling_delay(&name, next);
        }
        schedule_delay = next;
        delay = match (&spec.awake, result) {
            // Awake: writers may be leaving out their wake-ups, counting on the claim that follows.
            (Some(awake), RunResult::Full | RunResult::Partial) => {
                awake.store(true, Ordering::Release);
                Duration::ZERO
            }
            (Some(awake), RunResult::Short) if awake.swap(false, Ordering::AcqRel) => next.min(WAKE_GRACE),
            // A poller receiving a steady flow polls every `min-fixed-delay` from the start of one
            // run to the start of the next, so an event waits at most that long plus its own run.
            (_, RunResult::Partial) => next.saturating_sub(elapsed),
            _ => next,
        };
    }
    if let Some(awake) = &spec.awake {
        awake.store(false, Ordering::Release);
    }
}

async fn forward_wake_ups(mut source: Box<dyn WakeSource>, wakers: Wakers, stop: CancellationToken) {
    loop {
        let hint = tokio::select! {
            _ = stop.cancelled() => return,
            hint = source.next() => hint,
        };
        match hint {
            Some(WakeUp::EventType(event_type)) => {
                wakers.wake(&event_type);
            }
            Some(WakeUp::All) => wakers.wake_all(),
            None => {
                warn!("wake-up source ended; pollers continue on their schedules");
                return;
            }
        }
    }
}

async fn supervise(mut tasks: JoinSet<String>, shared: Arc<Shared>) {
    loop {
        let next = tokio::select! {
            biased;
            _ = shared.abort.cancelled() => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                return;
            }
            next = tasks.join_next() => next,
        };
        let Some(joined) = next else { return };
        if shared.stop_claiming.is_cancelled() {
            continue;
        }
        let reason = match joined {
            Ok(name) => format!("task {name} stopped unexpectedly"),
            Err(error) if error.is_panic() => format!("a task panicked: {error}"),
            Err(error) => format!("a task was cancelled: {error}"),
        };
        error!(%reason, "oncebox engine failed");
        shared.state.send_replace(Lifecycle::Failed(reason));
    }
}

impl EngineHandle {
    /// The current state.
    pub fn state(&self) -> Lifecycle {
        self.shared.state.borrow().clone()
    }

    /// A receiver that sees every state change.
    pub fn watch_state(&self) -> watch::Receiver<Lifecycle> {
        self.shared.state.subscribe()
    }

    /// Running totals.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Cuts the sleep of `event_type`'s poller short; `false` when it has no poller.
    pub fn wake(&self, event_type: &str) -> bool {
        self.shared.wakers.wake(event_type)
    }

    /// The wakers, for wiring other hint sources.
    pub fn wakers(&self) -> Wakers {
        self.shared.wakers.clone()
    }

    /// Stops claiming, lets in-flight batches settle, flushes the sender, and returns once every
    /// task ended or `deadline` passed. Past the deadline the remaining tasks are aborted and an
    /// error says so; their claimed rows return to PENDING through stuck recovery.
    pub async fn shutdown(&self, deadline: Duration) -> Result<()> {
        let started = Instant::now();
        let previous = self.shared.state.send_replace(Lifecycle::Stopping);
        if previous == Lifecycle::Stopped {
            self.shared.state.send_replace(Lifecycle::Stopped);
            return Ok(());
        }
        self.shared.stop_claiming.cancel();
        let supervisor = self.shared.supervisor.lock().ok().and_then(|mut slot| slot.take());
        let mut outcome = Ok(());
        if let Some(mut supervisor) = supervisor
            && tokio::time::timeout(deadline, &mut supervisor).await.is_err()
        {
            self.shared.abort.cancel();
            let _ = supervisor.await;
            outcome = Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "shutdown deadline of {deadline:?} passed with batches in flight; they were aborted and \
                     stuck recovery will return their rows to PENDING"
                ),
            ));
        }
        if let Some(sender) = &self.shared.sender {
            let remaining = deadline.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
            if let Err(error) = sender.flush(remaining).await {
                warn!(%error, "sender flush at shutdown failed");
            }
        }
        self.shared.state.send_replace(Lifecycle::Stopped);
        info!("oncebox engine stopped");
        outcome
    }
}
