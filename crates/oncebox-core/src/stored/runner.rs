//! The two halves of the durable inbox at run time: the listener's hand-off
//! ([`StoredInbox::keeper`], registered with [`Handlers::store_in`](crate::consume::Handlers::store_in))
//! and the processor that runs the handlers on stored rows ([`StoredProcessor`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::{InboxBatch, InboxMessage, InboxSettlement, InboxStatus, NewInboxMessage};
use crate::config::Backoff;
use crate::consume::{Handler, HandlerFailure, HandlerFuture, Received, TxFuture, handler_failure, rollback};
use crate::dao::{JobLock, StoredInboxDao, StoredInboxTransactions};
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::hooks::{OutboxMetrics, StoredOutcome};
use crate::inbox::Consumed;
use crate::retry::{RetryDecision, decide};
use crate::serializer::JsonSerializer;

/// The user header a publisher may set to tie events of one business flow together; without it,
/// a stored message's correlation id is the trace id of its `traceparent`.
pub const CORRELATION_ID_HEADER: &str = "correlation_id";

/// How a durable inbox stores, claims, retries and cleans up.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredInboxSettings {
    /// Messages one claim takes per event type.
    pub batch_size: u32,
    /// Handlers running at once in one processor, over all its event types. Each run holds a
    /// connection of the dialect's pool for its transaction (and more if the handler takes its
    /// own), so keep it well below the pool's size (10 by default): claims, settles and the
    /// listener's stores need connections too, and runs waiting on an empty pool stall the inbox.
    pub concurrency: usize,
    /// The wait between claims that found nothing; a message stored by this process's listener
    /// wakes the pollers at once.
    pub poll_interval: Duration,
    /// How long a claim may run before another poller takes the message over (its holder is
    /// taken to have crashed or stalled). Longer than any handler run.
    pub lease: Duration,
    /// Runs a message gets, the first included; the failed run that reaches it makes the message
    /// FAILED.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// How long PROCESSED rows are kept: the deduplication window. A message whose event is older
    /// than this is refused as poison when it arrives, since it may have been processed and
    /// forgotten.
    pub keep_processed: Duration,
    /// The wait between clean-ups of PROCESSED rows older than `keep_processed`.
    pub clean_up_every: Duration,
}

impl Default for StoredInboxSettings {
    fn default() -> Self {
        Self {
            batch_size: 32,
            concurrency: 4,
            poll_interval: Duration::from_millis(500),
            lease: Duration::from_secs(300),
            max_attempts: 10,
            backoff: Backoff {
                enabled: true,
                delay: Duration::from_secs(1),
                multiplier: 2.0,
                max_delay: Duration::from_secs(300),
                jitter: 0.2,
            },
            keep_processed: Duration::from_secs(7 * 24 * 3_600),
            clean_up_every: Duration::from_secs(60),
        }
    }
}

impl StoredInboxSettings {
    /// Checks the values that would stall or spin the pollers; the error names the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, problem: &str| {
            Err(Error::config(format_args!("oncebox.inbox.durable.{key}"), problem))
        };
        if self.batch_size == 0 {
            return bad("batch-size", "must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.max_attempts == 0 {
            return bad("max-attempts", "must be at least 1");
        }
        for (key, value) in [
            ("poll-interval", self.poll_interval),
            ("lease", self.lease),
            ("clean-up-every", self.clean_up_every),
        ] {
            if value.is_zero() {
                return bad(key, "must be longer than zero");
            }
        }
        Ok(())
    }
}

/// A durable inbox for one consumer: the listener stores each message through
/// [`keeper`](Self::keeper) and acknowledges the broker at once; a [`StoredProcessor`] runs the
/// handlers on the stored rows. Cheap to clone.
#[derive(Clone)]
pub struct StoredInbox {
    consumer: Arc<str>,
    dao: Arc<dyn StoredInboxDao>,
    settings: Arc<StoredInboxSettings>,
    stored: Arc<Notify>,
    /// The recording hook, when one is attached: only then does a processor count its rows.
    metrics: Option<Arc<dyn OutboxMetrics>>,
    /// The job lock the clean-up runs under, when one is attached: one instance at a time deletes.
    job_lock: Option<Arc<dyn JobLock>>,
}

/// How often a processor with metrics counts its rows by status.
const GAUGE_EVERY: Duration = Duration::from_secs(10);

impl fmt::Debug for StoredInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredInbox")
            .field("consumer", &self.consumer)
            .field("settings", &self.settings)
            .finish()
    }
}

impl StoredInbox {
    /// The durable inbox of `consumer` over `dao` (a dialect's
    /// [`stored_inbox_dao`](crate::Dialect::stored_inbox_dao)), with default settings.
    pub fn new(consumer: impl Into<String>, dao: Arc<dyn StoredInboxDao>) -> Self {
        Self {
            consumer: Arc::from(consumer.into()),
            dao,
            settings: Arc::new(StoredInboxSettings::default()),
            stored: Arc::new(Notify::new()),
            metrics: None,
            job_lock: None,
        }
    }

    /// The same inbox whose processors delete old PROCESSED rows under `lock` (the dialect's
    /// [`job_lock`](crate::Dialect::job_lock), on the `outbox_jobs` table), as the engine's
    /// clean-ups do: one instance at a time, at most once per
    /// [`clean_up_every`](StoredInboxSettings::clean_up_every) over all of them. Without it every
    /// processor deletes on its own schedule, which is correct but repeats the work.
    #[must_use]
    pub fn with_job_lock(mut self, lock: Arc<dyn JobLock>) -> Self {
        self.job_lock = Some(lock);
        self
    }

    /// The same inbox recording what its listener and processors do into `metrics`
    /// ([`StoredOutcome`] counts, handler durations, the write-to-effect latency, and every
    /// 10 s the rows of each handled event type by status).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn OutboxMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn record(&self, event_type: &str, outcome: StoredOutcome) {
        if let Some(metrics) = &self.metrics {
            metrics.stored_message(&self.consumer, event_type, outcome);
        }
    }

    /// The same inbox with `settings`, checked.
    pub fn with_settings(mut self, settings: StoredInboxSettings) -> Result<Self> {
        settings.validate()?;
        self.settings = Arc::new(settings);
        Ok(self)
    }

    /// The consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The settings.
    pub fn settings(&self) -> &StoredInboxSettings {
        &self.settings
    }

    /// The DAO, for tools and tests.
    pub fn dao(&self) -> &Arc<dyn StoredInboxDao> {
        &self.dao
    }

    /// The listener's handler of every stored event type: stores the message and answers
    /// [`Consumed::Applied`] (new) or [`Consumed::Duplicate`] (its id is stored already), so the
    /// listener acknowledges the broker only once the row committed. A failed store fails the
    /// run and the broker keeps the message. An event older than
    /// [`keep_processed`](StoredInboxSettings::keep_processed) is refused as poison
    /// ([`ErrorKind::TooOld`]): it may have been processed and cleaned up.
    pub fn keeper<M: fmt::Display + Send + 'static>(&self) -> Handler<M> {
        let inbox = self.clone();
        Arc::new(move |received: Received<Vec<u8>, M>| -> HandlerFuture {
            let inbox = inbox.clone();
            Box::pin(async move { inbox.keep(received).await })
        })
    }

    async fn keep<M: fmt::Display>(
        &self,
        received: Received<Vec<u8>, M>,
    ) -> Result<Consumed<()>, HandlerFailure> {
        let id = received.id;
        if let Some(age) = crate::inbox::too_old(received.created_at, self.settings.keep_processed) {
            let text = format!(
                "event {id} is {}s old, older than the durable inbox of {} keeps processed messages ({}s, \
                 oncebox.inbox.durable.keep-processed): it may have been processed and cleaned up, so it is not stored",
                age.as_secs(),
                self.consumer,
                self.settings.keep_processed.as_secs()
            );
            return Err(HandlerFailure::Poison(Error::new(ErrorKind::TooOld, text)));
        }
        let message = new_message(&self.consumer, received);
        match self.dao.store(&message).await {
            Ok(true) => {
                self.record(&message.event_type, StoredOutcome::Stored);
                self.stored.notify_waiters();
                Ok(Consumed::Applied(()))
            }
            Ok(false) => {
                self.record(&message.event_type, StoredOutcome::Duplicate);
                Ok(Consumed::Duplicate)
            }
            Err(error) => Err(HandlerFailure::Failed(error.context(format!("storing event {id}")))),
        }
    }

    /// A processor of this inbox's rows with no handler yet.
    pub fn processor(&self) -> StoredProcessor {
        StoredProcessor { inbox: self.clone(), handlers: HashMap::new() }
    }
}

/// The row a listener stores for `received`: its correlation id is the `correlation_id` header, or
/// else the trace id of its `traceparent`.
fn new_message<M: fmt::Display>(consumer: &str, received: Received<Vec<u8>, M>) -> NewInboxMessage {
    let correlation_id = received.headers.get(CORRELATION_ID_HEADER).cloned().or_else(|| {
        let traceparent = received.headers.get("traceparent")?;
        traceparent.split('-').nth(1).filter(|id| id.len() == 32).map(str::to_owned)
    });
    NewInboxMessage {
        consumer: consumer.to_owned(),
        id: received.id,
        event_type: received.event_type,
        payload_type: received.payload_type,
        source: received.source.to_string(),
        payload: received.payload,
        headers: received.headers,
        correlation_id,
        created_at: received.created_at,
    }
}

/// Where a stored message came from, as its handler sees it: the `M` of a processor's
/// [`Received`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSource {
    /// The consumer.
    pub consumer: Arc<str>,
    /// Where the broker had it when it was stored.
    pub source: String,
    /// Failed runs before this one.
    pub attempts: u32,
    /// When it was stored.
    pub received_at: DateTime<Utc>,
    /// The token of this run's claim.
    pub claim_token: Uuid,
}

/// An event as a processor's handler receives it.
pub type StoredEvent<T> = Received<T, StoredSource>;

/// What a registered handler did with its claim: settled it PROCESSED (`true`), or found that
/// another poller took it over (`false`, nothing committed).
type SettleFuture = Pin<Box<dyn Future<Output = Result<bool, HandlerFailure>> + Send>>;

type StoredHandler = Arc<dyn Fn(Received<Vec<u8>, StoredSource>) -> SettleFuture + Send + Sync>;

/// Runs handlers on the stored messages of one [`StoredInbox`]: per event type, a poller claims due
/// rows (fenced like the outbox's claim), runs up to
/// [`concurrency`](StoredInboxSettings::concurrency) handlers at once and settles each row; a
/// recovery task returns rows whose lease ran out, and a clean-up task deletes old PROCESSED rows.
/// Several processes may run processors of one consumer: claims are never shared.
pub struct StoredProcessor {
    inbox: StoredInbox,
    handlers: HashMap<String, StoredHandler>,
}

impl fmt::Debug for StoredProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut types: Vec<&String> = self.handlers.keys().collect();
        types.sort();
        f.debug_struct("StoredProcessor").field("inbox", &self.inbox).field("event_types", &types).finish()
    }
}

impl StoredProcessor {
    /// Handles `event_type` in a transaction of its own: begins one from `transactions` (the
    /// dialect), runs `handler` with it and the event (payload decoded as JSON), settles the row
    /// PROCESSED in the same transaction and commits, so the effect and the settle commit together
    /// or not at all. When the claim's lease ran out and another poller took the row over, the
    /// transaction is rolled back: that poller's run is the one that counts.
    #[must_use]
    pub fn on_in<T, S, F>(mut self, event_type: impl Into<String>, transactions: S, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        S: StoredInboxTransactions,
        F: for<'a> Fn(&'a mut S::Tx, StoredEvent<T>) -> TxFuture<'a> + Send + Sync + 'static,
    {
        let shared = Arc::new((transactions, handler));
        let erased: StoredHandler = Arc::new(move |raw: Received<Vec<u8>, StoredSource>| -> SettleFuture {
            let shared = Arc::clone(&shared);
            Box::pin(async move {
                let (transactions, handler) = &*shared;
                let event = raw.decode(&JsonSerializer)?;
                let (id, consumer, token) =
                    (event.id, event.source.consumer.clone(), event.source.claim_token);
                let mut tx = transactions.begin().await.map_err(HandlerFailure::Failed)?;
                let settled = match handler(&mut tx, event).await {
                    Err(error) => Err(handler_failure(id, error)),
                    Ok(()) => transactions.finish_in(&mut tx, &consumer, id, token).await.map_err(|error| {
                        HandlerFailure::Failed(error.context(format!("settling event {id}")))
                    }),
                };
                // A failed run, or a claim another poller took over: nothing of this run commits.
                if !matches!(settled, Ok(true)) {
                    rollback(transactions, tx, id).await;
                    return settled;
                }
                transactions.commit(tx).await.map_err(|error| {
                    HandlerFailure::Failed(error.context(format!("committing the effect of event {id}")))
                })?;
                Ok(true)
            })
        });
        self.handlers.insert(event_type.into(), erased);
        self
    }

    /// Handles `event_type` with an effect outside any transaction of the inbox's (a call to
    /// another service, say), the payload decoded as JSON, then settles the row PROCESSED. A crash
    /// between the effect and the settle runs the effect again after the lease: at least once,
    /// so the effect must be idempotent. Prefer [`on_in`](Self::on_in) where the effect is in the
    /// database.
    #[must_use]
    pub fn on<T, F, Fut>(mut self, event_type: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(StoredEvent<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), BoxError>> + Send + 'static,
    {
        let dao = Arc::clone(&self.inbox.dao);
        let handler = Arc::new(handler);
        let erased: StoredHandler = Arc::new(move |raw: Received<Vec<u8>, StoredSource>| -> SettleFuture {
            let (dao, handler) = (Arc::clone(&dao), Arc::clone(&handler));
            Box::pin(async move {
                let event = raw.decode(&JsonSerializer)?;
                let (id, consumer, token) =
                    (event.id, event.source.consumer.clone(), event.source.claim_token);
                handler(event).await.map_err(|error| handler_failure(id, error))?;
                dao.settle(&consumer, id, token, &InboxSettlement::Processed).await.map_err(|error| {
                    HandlerFailure::Failed(error.context(format!("settling the applied event {id}")))
                })
            })
        });
        self.handlers.insert(event_type.into(), erased);
        self
    }

    /// The event types with a handler, sorted: the types a listener must store.
    pub fn event_types(&self) -> Vec<String> {
        let mut types: Vec<String> = self.handlers.keys().cloned().collect();
        types.sort();
        types
    }

    /// Starts the pollers, the recovery and the clean-up on the current Tokio runtime.
    pub fn start(self) -> Result<StoredProcessing> {
        if self.handlers.is_empty() {
            return Err(Error::config("inbox.durable", "no event type has a handler"));
        }
        let (stop, stopping) = watch::channel(false);
        let mut tasks = JoinSet::new();
        if let Some(metrics) = self.inbox.metrics.clone() {
            tasks.spawn(count_rows(self.inbox.clone(), metrics, self.event_types(), stopping.clone()));
        }
        // One budget of runs for every type, so the processor never holds more connections than
        // `concurrency` however many types it handles.
        let runs = Arc::new(Semaphore::new(self.inbox.settings.concurrency.max(1)));
        for (event_type, handler) in self.handlers {
            let poller = Poller { inbox: self.inbox.clone(), event_type, handler, runs: Arc::clone(&runs) };
            tasks.spawn(poller.run(stopping.clone()));
        }
        tasks.spawn(recover(self.inbox.clone(), stopping.clone()));
        tasks.spawn(clean_up(self.inbox.clone(), stopping));
        Ok(StoredProcessing { stop, tasks })
    }
}

/// The running tasks of a [`StoredProcessor`].
#[derive(Debug)]
pub struct StoredProcessing {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl StoredProcessing {
    /// Stops claiming, waits up to `timeout` for the runs in flight to settle, then aborts what is
    /// left (its rows come back after the lease). Returns whether everything stopped in time.
    pub async fn shutdown(mut self, timeout: Duration) -> bool {
        self.stop.send_replace(true);
        let drained =
            tokio::time::timeout(timeout, async { while self.tasks.join_next().await.is_some() {} });
        if drained.await.is_ok() {
            return true;
        }
        self.tasks.abort_all();
        false
    }
}

/// Waits `wait`; `false` (at once) when `stopping` turns true.
async fn pause(wait: Duration, stopping: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        _ = stopping.wait_for(|stop| *stop) => false,
    }
}

/// The poller of one event type.
struct Poller {
    inbox: StoredInbox,
    event_type: String,
    handler: StoredHandler,
    /// The processor's run budget, shared by the pollers of all its types.
    runs: Arc<Semaphore>,
}

impl Poller {
    /// Claims and runs until `stopping`. The next claim is made as soon as the claimed messages
    /// have all started (not when they have all finished), so the run slots stay busy while
    /// claims go on; a claim that found less than a batch waits for the poll interval or for a
    /// message this process stored. At stop, the runs in flight and the claimed messages not yet
    /// started are finished (they hold claims), and nothing more is claimed.
    async fn run(self, mut stopping: watch::Receiver<bool>) {
        let settings = Arc::clone(&self.inbox.settings);
        let (consumer, event_type) = (&*self.inbox.consumer, self.event_type.as_str());
        let mut queued: VecDeque<(InboxMessage, Uuid)> = VecDeque::new();
        let mut running = FuturesUnordered::new();
        let mut claiming: Option<Pin<Box<dyn Future<Output = Result<InboxBatch>> + Send + '_>>> = None;
        // Set after a claim that found less than a batch (or failed): no claim before then.
        let mut idle_until: Option<tokio::time::Instant> = None;
        // Also set when the processing handle is gone: nobody can ask for a stop any more.
        let mut stop_requested = false;
        loop {
            while running.len() < settings.concurrency {
                let Some((message, token)) = queued.pop_front() else { break };
                running.push(self.run_slot(message, token));
            }
            let stopped = stop_requested || *stopping.borrow();
            if stopped && claiming.is_none() && running.is_empty() && queued.is_empty() {
                return;
            }
            if !stopped && queued.is_empty() && claiming.is_none() && idle_until.is_none() {
                claiming = Some(Box::pin(self.inbox.dao.claim(consumer, event_type, settings.batch_size)));
            }
            let resting = idle_until.is_some() && claiming.is_none() && queued.is_empty() && !stopped;
            let wake_at = idle_until.unwrap_or_else(tokio::time::Instant::now);
            tokio::select! {
                Some(()) = running.next(), if !running.is_empty() => {}
                claimed = async {
                    match claiming.as_mut() {
                        Some(claim) => claim.await,
                        None => std::future::pending().await,
                    }
                }, if claiming.is_some() => {
                    claiming = None;
                    match claimed {
                        Ok(batch) => {
                            let full = batch.messages.len() >= settings.batch_size as usize;
                            let token = batch.claim_token;
                            queued.extend(batch.messages.into_iter().map(|message| (message, token)));
                            idle_until = (!full).then(|| tokio::time::Instant::now() + settings.poll_interval);
                        }
                        Err(error) => {
                            tracing::warn!(consumer, event_type, %error, "claiming stored inbox messages failed; trying again");
                            idle_until = Some(tokio::time::Instant::now() + settings.poll_interval);
                        }
                    }
                }
                () = tokio::time::sleep_until(wake_at), if resting => idle_until = None,
                () = self.inbox.stored.notified(), if resting => idle_until = None,
                changed = stopping.changed(), if !stopped => stop_requested = changed.is_err(),
            }
        }
    }

    /// One run in the processor's budget.
    async fn run_slot(&self, message: InboxMessage, token: Uuid) {
        // Never closed; a failed acquire would only mean running without the budget.
        let _permit = self.runs.acquire().await.ok();
        self.run_one(message, token).await;
    }

    /// Runs the handler on one claimed message and settles it.
    async fn run_one(&self, stored: InboxMessage, token: Uuid) {
        let settings = &self.inbox.settings;
        let (id, attempts) = (stored.message.id, stored.attempts);
        let consumer = Arc::clone(&self.inbox.consumer);
        let received = Received {
            id,
            event_type: stored.message.event_type,
            payload_type: stored.message.payload_type,
            created_at: stored.message.created_at,
            headers: stored.message.headers,
            source: StoredSource {
                consumer: Arc::clone(&consumer),
                source: stored.message.source,
                attempts,
                received_at: stored.received_at,
                claim_token: token,
            },
            payload: stored.message.payload,
        };
        let created_at = received.created_at;
        let started = std::time::Instant::now();
        let ran = (self.handler)(received).await;
        if let Some(metrics) = &self.inbox.metrics {
            metrics.stored_handler_duration(&consumer, &self.event_type, started.elapsed());
        }
        let failure = match ran {
            Ok(true) => {
                self.inbox.record(&self.event_type, StoredOutcome::Processed);
                if let (Some(metrics), Some(created_at)) = (&self.inbox.metrics, created_at) {
                    let latency = Utc::now().signed_duration_since(created_at).to_std().unwrap_or_default();
                    metrics.stored_latency(&consumer, &self.event_type, latency);
                }
                return;
            }
            Ok(false) => {
                self.inbox.record(&self.event_type, StoredOutcome::TakenOver);
                tracing::warn!(consumer = &*consumer, event_id = %id, lease = ?settings.lease, "the handler outlasted its claim's lease and another poller took the message over; its work was rolled back");
                return;
            }
            Err(failure) => failure,
        };
        let settlement = match failure {
            HandlerFailure::Poison(error) => InboxSettlement::Failed { error: error.to_string() },
            HandlerFailure::Failed(error) if error.kind() == ErrorKind::Permanent => {
                InboxSettlement::Failed { error: error.to_string() }
            }
            HandlerFailure::Failed(error) => {
                // Attempts before this run, plus this one; max-attempts counts runs, decide counts retries.
                match decide(
                    attempts.saturating_add(1),
                    settings.max_attempts.saturating_sub(1),
                    &settings.backoff,
                ) {
                    RetryDecision::RetryAfter(after) => {
                        InboxSettlement::Retry { after, error: error.to_string() }
                    }
                    RetryDecision::GiveUp => InboxSettlement::Failed { error: error.to_string() },
                }
            }
        };
        let outcome = match settlement {
            InboxSettlement::Retry { .. } => StoredOutcome::Retried,
            _ => StoredOutcome::Failed,
        };
        self.inbox.record(&self.event_type, outcome);
        match &settlement {
            InboxSettlement::Retry { after, error } => {
                tracing::warn!(consumer = &*consumer, event_id = %id, attempts = attempts + 1, retry_in = ?after, error, "a stored message's handler failed; it runs again later");
            }
            InboxSettlement::Failed { error } => {
                tracing::error!(consumer = &*consumer, event_id = %id, attempts = attempts + 1, error, "a stored message is given up: FAILED, kept for a person");
            }
            InboxSettlement::Processed => {}
        }
        match self.inbox.dao.settle(&consumer, id, token, &settlement).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(consumer = &*consumer, event_id = %id, "a failed run's claim was taken over before it settled; the new holder decides")
            }
            Err(error) => {
                tracing::warn!(consumer = &*consumer, event_id = %id, %error, "settling a failed run failed; the message comes back after the lease")
            }
        }
    }
}

/// Returns rows whose claim's lease ran out, every quarter lease.
async fn recover(inbox: StoredInbox, mut stopping: watch::Receiver<bool>) {
    let every = (inbox.settings.lease / 4).max(Duration::from_millis(100));
    while pause(every, &mut stopping).await {
        match inbox
            .dao
            .recover_stuck(&inbox.consumer, inbox.settings.lease, inbox.settings.max_attempts)
            .await
        {
            Ok(0) => {}
            Ok(recovered) => {
                tracing::warn!(
                    consumer = &*inbox.consumer,
                    recovered,
                    "stored inbox messages whose claim's lease ran out were returned (or failed after their last attempt)"
                );
                inbox.stored.notify_waiters();
            }
            Err(error) => {
                tracing::warn!(consumer = &*inbox.consumer, %error, "recovering stored inbox messages failed")
            }
        }
    }
}

/// Sets the row gauges of `event_types` every [`GAUGE_EVERY`]: each status of each type, 0 where
/// the count has no row, so a status that emptied does not keep its last value.
async fn count_rows(
    inbox: StoredInbox,
    metrics: Arc<dyn OutboxMetrics>,
    event_types: Vec<String>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        match inbox.dao.counts().await {
            Ok(counts) => {
                for event_type in &event_types {
                    for status in InboxStatus::ALL {
                        let rows = counts
                            .iter()
                            .find(|count| {
                                *count.consumer == *inbox.consumer
                                    && count.event_type == *event_type
                                    && count.status == status
                            })
                            .map_or(0, |count| count.rows);
                        metrics.stored_rows(&inbox.consumer, event_type, status, rows);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(consumer = &*inbox.consumer, %error, "counting stored inbox messages failed; the gauges keep their last values");
            }
        }
        if !pause(GAUGE_EVERY, &mut stopping).await {
            return;
        }
    }
}

/// Deletes PROCESSED rows older than the deduplication window, under the job lock when there is
/// one (held at least half the period, so instances do not delete back to back, and at most ten
/// periods, so a crashed holder does not stop the clean-up for long).
async fn clean_up(inbox: StoredInbox, mut stopping: watch::Receiver<bool>) {
    const ROWS: u32 = 1_000;
    let job = format!("stored-inbox-clean-up:{}", inbox.consumer);
    let owner = Uuid::new_v4();
    let every = inbox.settings.clean_up_every;
    while pause(every, &mut stopping).await {
        let lease = match &inbox.job_lock {
            None => None,
            Some(lock) => match lock.try_lock(&job, owner, every / 2, every.saturating_mul(10)).await {
                Ok(Some(lease)) => Some((lock, lease)),
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(consumer = &*inbox.consumer, %error, "taking the stored inbox clean-up's job lock failed");
                    continue;
                }
            },
        };
        delete_processed(&inbox, ROWS).await;
        if let Some((lock, lease)) = lease
            && let Err(error) = lock.unlock(&lease).await
        {
            tracing::warn!(consumer = &*inbox.consumer, %error, "releasing the stored inbox clean-up's job lock failed; it runs out on its own");
        }
    }
}

/// Deletes PROCESSED rows older than the deduplication window, `rows` at a time until fewer remain.
async fn delete_processed(inbox: &StoredInbox, rows: u32) {
    loop {
        match inbox.dao.delete_processed(&inbox.consumer, inbox.settings.keep_processed, rows).await {
            Ok(deleted) if deleted >= u64::from(rows) => {}
            Ok(deleted) => {
                if deleted > 0 {
                    tracing::debug!(consumer = &*inbox.consumer, deleted, "deleted processed inbox messages");
                }
                return;
            }
            Err(error) => {
                tracing::warn!(consumer = &*inbox.consumer, %error, "deleting processed inbox messages failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Headers;
    use crate::stored::{InboxBatch, InboxCount};

    /// A DAO no test may reach: the checks under test come before any storage.
    struct Unreachable;

    #[async_trait::async_trait]
    impl StoredInboxDao for Unreachable {
        async fn store(&self, _: &NewInboxMessage) -> Result<bool> {
            Err(Error::new(ErrorKind::Other, "store was called"))
        }
        async fn claim(&self, _: &str, _: &str, _: u32) -> Result<InboxBatch> {
            Err(Error::new(ErrorKind::Other, "claim was called"))
        }
        async fn settle(&self, _: &str, _: Uuid, _: Uuid, _: &InboxSettlement) -> Result<bool> {
            Err(Error::new(ErrorKind::Other, "settle was called"))
        }
        async fn recover_stuck(&self, _: &str, _: Duration, _: u32) -> Result<u64> {
            Err(Error::new(ErrorKind::Other, "recover_stuck was called"))
        }
        async fn delete_processed(&self, _: &str, _: Duration, _: u32) -> Result<u64> {
            Err(Error::new(ErrorKind::Other, "delete_processed was called"))
        }
        async fn get(&self, _: &str, _: Uuid) -> Result<Option<InboxMessage>> {
            Err(Error::new(ErrorKind::Other, "get was called"))
        }
        async fn counts(&self) -> Result<Vec<InboxCount>> {
            Err(Error::new(ErrorKind::Other, "counts was called"))
        }
    }

    fn received(headers: &[(&str, &str)], age: chrono::Duration) -> Received<Vec<u8>, &'static str> {
        Received {
            id: Uuid::now_v7(),
            event_type: "order-created".into(),
            payload_type: Some("OrderCreated".into()),
            created_at: Some(Utc::now() - age),
            headers: headers
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect::<Headers>(),
            source: "queue 'billing'",
            payload: b"{}".to_vec(),
        }
    }

    #[test]
    fn the_correlation_id_is_the_header_else_the_trace_id_of_the_traceparent() {
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let traced = new_message("billing", received(&[("traceparent", trace)], chrono::Duration::zero()));
        assert_eq!(traced.correlation_id.as_deref(), Some("0af7651916cd43dd8448eb211c80319c"));
        assert_eq!(traced.source, "queue 'billing'");
        let both = received(
            &[("traceparent", trace), (CORRELATION_ID_HEADER, "order-42")],
            chrono::Duration::zero(),
        );
        assert_eq!(new_message("billing", both).correlation_id.as_deref(), Some("order-42"));
        let malformed = received(&[("traceparent", "garbage")], chrono::Duration::zero());
        assert_eq!(new_message("billing", malformed).correlation_id, None);
    }

    #[tokio::test]
    async fn an_event_older_than_the_processed_rows_are_kept_is_refused_before_it_is_stored() {
        let inbox = StoredInbox::new("billing", Arc::new(Unreachable));
        let old = received(&[], chrono::Duration::days(8));
        match inbox.keeper()(old).await {
            Err(HandlerFailure::Poison(error)) => assert_eq!(error.kind(), ErrorKind::TooOld, "{error}"),
            other => panic!("an 8-day-old event was not refused: {other:?}"),
        }
        // A young one reaches the store (which this DAO refuses): a failed run, not poison.
        match inbox.keeper()(received(&[], chrono::Duration::days(1))).await {
            Err(HandlerFailure::Failed(error)) => {
                assert!(error.to_string().contains("store was called"), "{error}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn settings_that_would_stall_or_spin_the_pollers_are_refused_by_name() {
        let zero_lease = StoredInboxSettings { lease: Duration::ZERO, ..StoredInboxSettings::default() };
        let problem = StoredInbox::new("billing", Arc::new(Unreachable)).with_settings(zero_lease).err();
        assert!(problem.is_some_and(|error| error.to_string().contains("oncebox.inbox.durable.lease")));
        assert!(StoredInboxSettings::default().validate().is_ok());
    }

    #[test]
    fn a_processor_without_handlers_does_not_start() {
        let processor = StoredInbox::new("billing", Arc::new(Unreachable)).processor();
        assert!(processor.start().err().is_some_and(|error| error.kind() == ErrorKind::Config));
    }
}
