//! Engine behaviour on tokio's paused clock, with scripted DAOs and senders.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use async_trait::async_trait;
use chrono::Utc;
use tokio::time::Instant as TokioInstant;

use super::*;
use crate::activity::PollerActivity;
use crate::config::{ConfigBuilder, EventSettings};
use crate::event::{ClaimedBatch, EventStatus, OutboxCounts, OutboxEvent, SettleReport, Settlement};
use crate::sender::{Deadline, SendError, unanswered_as_timeouts};

/// An outbox of `pending` identical rows that records when each claim happened.
#[derive(Default)]
struct ScriptedOutbox {
    pending: Mutex<u64>,
    claims: Mutex<Vec<TokioInstant>>,
    /// When each non-empty batch was claimed, by the id of its first event.
    batch_claims: Mutex<HashMap<Uuid, TokioInstant>>,
    refuse_settles: bool,
    panic_on_claim: bool,
    /// How long every settle takes (a slow database, or a pool waiting for a connection).
    settle_delay: Duration,
    /// Settles that fail with a temporary error, having applied nothing, before one succeeds.
    settle_failures: Mutex<u32>,
    settle_calls: AtomicUsize,
}

impl ScriptedOutbox {
    fn with_pending(pending: u64) -> Self {
        Self { pending: Mutex::new(pending), ..Self::default() }
    }

    fn claim_times(&self) -> Vec<TokioInstant> {
        self.claims.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn claimed_at(&self, first_id: Uuid) -> Option<TokioInstant> {
        self.batch_claims.lock().ok().and_then(|claims| claims.get(&first_id).copied())
    }
}

fn event(event_type: &str) -> OutboxEvent {
    let now = Utc::now();
    OutboxEvent {
        id: Uuid::now_v7(),
        event_type: event_type.to_owned(),
        payload: "{}".into(),
        payload_type: "Test".into(),
        headers: Default::default(),
        partition_key: None,
        status: EventStatus::InProcess,
        attempts: 0,
        next_retry_at: now,
        created_at: now,
        updated_at: now,
        processed_at: None,
        last_error: None,
        claim_token: None,
    }
}

#[async_trait]
impl OutboxDao for ScriptedOutbox {
    async fn claim(&self, event_type: &str, limit: u32) -> Result<ClaimedBatch> {
        assert!(!self.panic_on_claim, "scripted claim failure");
        if let Ok(mut claims) = self.claims.lock() {
            claims.push(TokioInstant::now());
        }
        let take = {
            let mut pending = self.pending.lock().map_err(|_| Error::new(ErrorKind::Other, "poisoned"))?;
            let take = (*pending).min(u64::from(limit));
            *pending -= take;
            take
        };
        let batch = ClaimedBatch {
            event_type: event_type.to_owned(),
            claim_token: Uuid::now_v7(),
            events: (0..take).map(|_| event(event_type)).collect(),
        };
        if let (Some(first), Ok(mut claims)) = (batch.events.first(), self.batch_claims.lock()) {
            claims.insert(first.id, TokioInstant::now());
        }
        Ok(batch)
    }

    async fn settle(&self, _batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        tokio::time::sleep(self.settle_delay).await;
        self.settle_calls.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut failures) = self.settle_failures.lock()
            && *failures > 0
        {
            *failures -= 1;
            return Err(Error::temporary(ErrorKind::Database, "connection lost before commit"));
        }
        let n = settlements.len() as u64;
        Ok(if self.refuse_settles {
            SettleReport { settled: 0, refused: n }
        } else {
            SettleReport { settled: n, refused: 0 }
        })
    }

    async fn recover_stuck(&self, _older_than: Duration, _max_recoveries: u32, _limit: u32) -> Result<u64> {
        Ok(0)
    }

    async fn delete_processed(&self, _older_than: Duration, _limit: u32) -> Result<u64> {
        Ok(0)
    }

    async fn get(&self, _id: Uuid) -> Result<Option<OutboxEvent>> {
        Ok(None)
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        Ok(OutboxCounts::default())
    }
}

/// Acknowledges everything after `delay` (or refuses everything when `refuse`), tracking the most
/// batches in flight at once.
#[derive(Default)]
struct CountingSender {
    delay: Duration,
    refuse: bool,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

#[async_trait]
impl Sender for CountingSender {
    async fn send(
        &self,
        batch: &[crate::event::OutboundMessage],
        _deadline: Deadline,
    ) -> Vec<Result<(), SendError>> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        batch
            .iter()
            .map(
                |_| {
                    if self.refuse { Err(Error::temporary(ErrorKind::Broker, "broker down")) } else { Ok(()) }
                },
            )
            .collect()
    }
}

fn outbox_only(builder: ConfigBuilder) -> Config {
    builder.processed_clean_up(None).build().expect("the test config is valid")
}

/// One event type, `e`, polled first at once, then every 5 s growing to 60 s: slow enough that a
/// claim soon after another is the work of a wake-up.
fn slow_polling_of_e() -> Config {
    let slow = crate::config::Polling::Adaptive {
        initial_delay: Duration::ZERO,
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        multiplier: 2.0,
    };
    outbox_only(Config::builder().event("e", EventSettings::new("t").polling(slow)))
}

fn start(config: Config, outbox: Arc<ScriptedOutbox>, sender: Arc<dyn Sender>) -> EngineHandle {
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(outbox);
    parts.sender = Some(sender);
    Engine::start(parts).expect("the engine starts")
}

#[tokio::test(start_paused = true)]
async fn an_idle_hour_costs_about_70_polls_and_the_delay_caps_after_14() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let engine = start(config, outbox.clone(), Arc::new(CountingSender::default()));
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let claims: Vec<Duration> = outbox.claim_times().iter().map(|t| t.duration_since(started)).collect();
    assert!((68..=74).contains(&claims.len()), "{} polls in an idle hour", claims.len());
    let gaps: Vec<Duration> = claims.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[12] < Duration::from_secs(60), "gap after 13 empty polls: {:?}", gaps[12]);
    assert_eq!(gaps[13], Duration::from_secs(60), "gap after 14 empty polls");
    assert!(gaps[14..].iter().all(|gap| *gap == Duration::from_secs(60)));
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn a_full_backlog_drains_without_waiting_between_full_batches() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(1000));
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t").batch_size(200)));
    let engine = start(config, outbox.clone(), Arc::new(CountingSender::default()));
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let claims = outbox.claim_times();
    // Five full batches and the empty claim that ends the drain, all at the start instant.
    assert!(claims.len() >= 6, "{} claims", claims.len());
    assert!(claims[..6].iter().all(|t| *t == started), "full batches waited: {:?}", claims);
    assert_eq!(engine.stats().delivered, 1000);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

/// Events that keep arriving, a few per poll, keep the poller at its minimum delay: with wake-ups
/// off, a delay grown on every short batch would make each event wait up to the maximum (60 s).
#[tokio::test(start_paused = true)]
async fn a_steady_trickle_is_polled_every_minimum_delay_not_at_a_grown_one() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t").batch_size(200)));
    let engine = start(config, outbox.clone(), Arc::new(CountingSender::default()));
    let trickle = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            for _ in 0..600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(mut pending) = outbox.pending.lock() {
                    *pending += 5;
                }
            }
        })
    };
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(61)).await;
    trickle.await.expect("the trickle ends");
    let mut claims = offsets_from(started, &outbox.claim_times());
    // After the trickle's last events the polls find nothing and the delay grows again.
    claims.retain(|offset| *offset <= 60_000);
    let gaps: Vec<u64> = claims.windows(2).map(|w| w[1] - w[0]).collect();
    // The first poll, at the start, found nothing yet and grew the delay once.
    assert_eq!(gaps[0], 375);
    assert!(gaps[1..].iter().all(|gap| *gap <= 250), "a poll waited longer than min-fixed-delay: {gaps:?}");
    assert!(claims.len() >= 239, "{} polls in a minute of trickle", claims.len());
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.stats().delivered, 3000, "every event of the trickle was delivered");
}

fn offsets_from(started: TokioInstant, claims: &[TokioInstant]) -> Vec<u64> {
    claims.iter().map(|t| t.duration_since(started).as_millis() as u64).collect()
}

#[tokio::test(start_paused = true)]
async fn the_next_claim_overlaps_the_current_send_and_sends_never_overlap() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(1000));
    let sender = Arc::new(CountingSender { delay: Duration::from_millis(100), ..CountingSender::default() });
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t").batch_size(200)));
    let engine = start(config, outbox.clone(), sender.clone());
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Batch 2 is claimed while batch 1 is sent; each later claim starts with the previous send.
    // The sixth claim finds nothing and ends the drain after five sends, not six.
    assert_eq!(offsets_from(started, &outbox.claim_times()[..6]), [0, 0, 100, 200, 300, 400]);
    assert_eq!(sender.max_in_flight.load(Ordering::SeqCst), 1, "sends overlapped");
    assert_eq!(engine.stats().delivered, 1000);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn claiming_ahead_is_off_when_stuck_recovery_could_take_a_waiting_batch() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(600));
    let sender = Arc::new(CountingSender { delay: Duration::from_millis(100), ..CountingSender::default() });
    let recovery =
        crate::config::Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_secs(60) };
    let config = outbox_only(
        Config::builder()
            .emergency_timeout(Duration::from_secs(60))
            .stuck_recovery(Duration::from_secs(100), recovery)
            .event("e", EventSettings::new("t").batch_size(200)),
    );
    let engine = start(config, outbox.clone(), sender);
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(offsets_from(started, &outbox.claim_times()[..4]), [0, 100, 200, 300]);
    assert_eq!(engine.stats().delivered, 600);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

/// Acknowledges every batch after `delay` and records when each batch's send started, by the id
/// of its first event.
#[derive(Default)]
struct RecordingSender {
    delay: Duration,
    sends: Mutex<Vec<(Uuid, TokioInstant)>>,
}

#[async_trait]
impl Sender for RecordingSender {
    async fn send(
        &self,
        batch: &[crate::event::OutboundMessage],
        _deadline: Deadline,
    ) -> Vec<Result<(), SendError>> {
        if let (Some(first), Ok(mut sends)) = (batch.first(), self.sends.lock()) {
            sends.push((first.id, TokioInstant::now()));
        }
        tokio::time::sleep(self.delay).await;
        batch.iter().map(|_| Ok(())).collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_settle_never_holds_a_batch_claimed_ahead_past_its_processing_time() {
    let emergency_timeout = Duration::from_secs(10);
    let max_processing = Duration::from_secs(25);
    let outbox =
        Arc::new(ScriptedOutbox { settle_delay: emergency_timeout * 3, ..ScriptedOutbox::with_pending(100) });
    let sender =
        Arc::new(RecordingSender { delay: Duration::from_millis(100), ..RecordingSender::default() });
    let recovery =
        crate::config::Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_secs(60) };
    let config = outbox_only(
        Config::builder()
            .emergency_timeout(emergency_timeout)
            .stuck_recovery(max_processing, recovery)
            .event("e", EventSettings::new("t").batch_size(10)),
    );
    assert!(tasks::claim_ahead_is_safe(emergency_timeout, max_processing), "the case needs claiming ahead");
    let engine = start(config, outbox.clone(), sender.clone());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let sends = sender.sends.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(sends.len(), 10, "every batch is sent once");
    for (first_id, sent_at) in sends {
        let claimed_at =
            outbox.claimed_at(first_id).unwrap_or_else(|| panic!("batch {first_id} not claimed"));
        // A send may take the whole emergency timeout, and stuck recovery may take the rows once
        // max-batch-processing-time has passed since the claim.
        let waited = sent_at.duration_since(claimed_at);
        assert!(
            waited + emergency_timeout < max_processing,
            "a batch waited {waited:?} between its claim and its send"
        );
    }
    assert_eq!(engine.stats().delivered, 100);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_stops_claiming_ahead_until_a_send_gets_through() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(10_000));
    let sender = Arc::new(CountingSender {
        delay: Duration::from_millis(100),
        refuse: true,
        ..CountingSender::default()
    });
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t").batch_size(200)));
    let engine = start(config, outbox.clone(), sender);
    let started = TokioInstant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let claims = offsets_from(started, &outbox.claim_times());
    // The first run claimed one batch ahead before it knew the broker was down; the claimed batch
    // is still sent and settled. After that every run claims one batch and backs off.
    assert_eq!(claims[..2], [0, 0]);
    assert!(claims[2] >= 200, "a refused batch re-polled at once: {claims:?}");
    let gaps: Vec<u64> = claims[2..].windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|gap| *gap > 100), "claimed ahead against a refusing broker: {claims:?}");
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    let stats = engine.stats();
    assert_eq!(stats.claimed, stats.retried, "every claimed event was sent and settled for a retry");
}

#[tokio::test(start_paused = true)]
async fn wake_cuts_a_long_sleep_short() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let config = slow_polling_of_e();
    let engine = start(config, outbox.clone(), Arc::new(CountingSender::default()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    let before = outbox.claim_times().len();
    let woken_at = TokioInstant::now();
    assert!(engine.wake("e"));
    assert!(!engine.wake("unknown"));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let claims = outbox.claim_times();
    assert_eq!(claims.len(), before + 1, "the wake-up should poll at once");
    assert!(claims[before].duration_since(woken_at) < Duration::from_millis(1));
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn thread_pool_size_bounds_concurrent_runs() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(10_000));
    let sender = Arc::new(CountingSender { delay: Duration::from_millis(100), ..CountingSender::default() });
    let config = outbox_only(
        Config::builder()
            .thread_pool_size(2)
            .event("a", EventSettings::new("t").batch_size(10))
            .event("b", EventSettings::new("t").batch_size(10))
            .event("c", EventSettings::new("t").batch_size(10))
            .event("d", EventSettings::new("t").batch_size(10)),
    );
    let engine = start(config, outbox.clone(), sender.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sender.max_in_flight.load(Ordering::SeqCst), 2);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn concurrency_runs_that_many_claim_loops_of_one_type_and_each_event_is_sent_once() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(3_000));
    let sender = Arc::new(CountingSender { delay: Duration::from_millis(100), ..CountingSender::default() });
    let config = outbox_only(
        Config::builder()
            .thread_pool_size(5)
            .event("e", EventSettings::new("t").batch_size(10).concurrency(3)),
    );
    let engine = start(config, outbox.clone(), sender.clone());
    tokio::time::sleep(Duration::from_secs(60)).await;
    // One loop never sends two batches at once, so three sends in flight are three loops.
    assert_eq!(sender.max_in_flight.load(Ordering::SeqCst), 3);
    let stats = engine.stats();
    assert_eq!((stats.claimed, stats.delivered, stats.task_errors), (3_000, 3_000, 0));
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn refused_settles_are_reported() {
    let outbox = Arc::new(ScriptedOutbox { refuse_settles: true, ..ScriptedOutbox::with_pending(3) });
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let engine = start(config, outbox, Arc::new(CountingSender::default()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.stats().refused_settles, 3);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

/// The engine retries a settle as a whole, so a dialect's settle must apply all or nothing: the
/// retry then finds every row under its token, and nothing is counted as refused.
#[tokio::test(start_paused = true)]
async fn a_settle_that_failed_temporarily_is_retried_whole_and_counted_once() {
    let outbox =
        Arc::new(ScriptedOutbox { settle_failures: Mutex::new(1), ..ScriptedOutbox::with_pending(3) });
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let engine = start(config, outbox.clone(), Arc::new(CountingSender::default()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = engine.stats();
    assert_eq!(outbox.settle_calls.load(Ordering::SeqCst), 2, "one failed settle, one retry");
    assert_eq!((stats.delivered, stats.refused_settles, stats.task_errors), (3, 0, 0));
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test(start_paused = true)]
async fn lifecycle_runs_stops_and_fails_when_a_task_dies() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let engine = start(config.clone(), outbox, Arc::new(CountingSender::default()));
    assert_eq!(engine.state(), Lifecycle::Running);
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.state(), Lifecycle::Stopped);

    let dying = Arc::new(ScriptedOutbox { panic_on_claim: true, ..ScriptedOutbox::default() });
    let engine = start(config, dying, Arc::new(CountingSender::default()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(matches!(engine.state(), Lifecycle::Failed(reason) if reason.contains("panicked")));
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.state(), Lifecycle::Stopped);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_batch_in_flight_then_gives_up_at_the_deadline() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(5));
    let sender = Arc::new(CountingSender { delay: Duration::from_secs(2), ..CountingSender::default() });
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let engine = start(config.clone(), outbox, sender);
    tokio::time::sleep(Duration::from_millis(10)).await;
    engine.shutdown(Duration::from_secs(10)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.stats().delivered, 5, "the in-flight batch settles before shutdown returns");

    let outbox = Arc::new(ScriptedOutbox::with_pending(5));
    let stuck_sender =
        Arc::new(CountingSender { delay: Duration::from_secs(100), ..CountingSender::default() });
    let engine = start(config, outbox, stuck_sender);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let error = engine.shutdown(Duration::from_secs(1)).await.err().map(|e| e.kind());
    assert_eq!(error, Some(ErrorKind::Timeout));
    assert_eq!(engine.state(), Lifecycle::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_only_engine_with_nothing_to_schedule_is_idle_not_running() {
    let config =
        Config::builder().inbox_enabled(true).inbox_clean_up(None).build().expect("the test config is valid");
    let mut parts = EngineParts::new(config);
    parts.inbox = None;
    let engine = Engine::start(parts).expect("the engine starts");
    assert_eq!(engine.state(), Lifecycle::Idle);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.state(), Lifecycle::Idle, "nothing ran, so nothing can have failed");
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.state(), Lifecycle::Stopped);
}

#[tokio::test]
async fn starting_with_neither_outbox_nor_inbox_is_an_error_naming_both() {
    let config = Config::builder().build().expect("the test config is valid");
    let error = Engine::start(EngineParts::new(config)).err();
    assert_eq!(error.as_ref().map(|e| e.kind()), Some(ErrorKind::Lifecycle));
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("oncebox.outbox") && message.contains("oncebox.inbox"), "{message}");
}

#[tokio::test]
async fn starting_without_a_sender_is_an_error() {
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(Arc::new(ScriptedOutbox::default()));
    let error = Engine::start(parts).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("no sender"), "{error}");
}

/// Acknowledges the first message of a batch at once and never hears about the rest, so it
/// stops at its deadline as a real sender does; records the emergency timeout it was handed, or
/// refuses it.
#[derive(Default)]
struct FirstOnlySender {
    adopted: Mutex<Option<Duration>>,
    refuse_adoption: bool,
}

#[async_trait]
impl Sender for FirstOnlySender {
    async fn send(
        &self,
        batch: &[crate::event::OutboundMessage],
        deadline: Deadline,
    ) -> Vec<Result<(), SendError>> {
        let mut results: Vec<Option<Result<(), SendError>>> = batch.iter().map(|_| None).collect();
        if let Some(first) = results.first_mut() {
            *first = Some(Ok(()));
        }
        deadline.bound(std::future::pending::<()>()).await;
        unanswered_as_timeouts(results, batch, &deadline, "acknowledged")
    }

    fn adopt_emergency_timeout(&self, timeout: Duration) -> Result<()> {
        if self.refuse_adoption {
            return Err(Error::config("test.delivery-timeout", format!("is longer than {timeout:?}")));
        }
        if let Ok(mut adopted) = self.adopted.lock() {
            *adopted = Some(timeout);
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_sender_that_stops_at_its_deadline_keeps_the_answers_it_had() {
    let outbox = Arc::new(ScriptedOutbox::with_pending(10));
    let sender = Arc::new(FirstOnlySender::default());
    let config = outbox_only(
        Config::builder()
            .emergency_timeout(Duration::from_secs(5))
            .event("e", EventSettings::new("t").batch_size(10)),
    );
    let engine = start(config, outbox, sender.clone());
    assert_eq!(sender.adopted.lock().map(|a| *a).ok().flatten(), Some(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let stats = engine.stats();
    // The engine's bound fires at the same instant as the sender's; the acknowledged message
    // must still count as delivered, not be sent again.
    assert_eq!((stats.delivered, stats.retried), (1, 9), "{stats:?}");
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

#[tokio::test]
async fn a_sender_that_refuses_the_emergency_timeout_stops_the_start_naming_its_setting() {
    let config = outbox_only(Config::builder().event("e", EventSettings::new("t")));
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(Arc::new(ScriptedOutbox::default()));
    parts.sender = Some(Arc::new(FirstOnlySender { refuse_adoption: true, ..FirstOnlySender::default() }));
    let error = Engine::start(parts).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("test.delivery-timeout") && error.contains("120s"), "{error}");
}

struct ChannelWakeSource(tokio::sync::mpsc::UnboundedReceiver<WakeUp>);

#[async_trait]
impl WakeSource for ChannelWakeSource {
    async fn next(&mut self) -> Option<WakeUp> {
        self.0.recv().await
    }
}

#[tokio::test(start_paused = true)]
async fn wake_up_hints_from_the_dialect_poll_the_named_type_or_all() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let slow =
        crate::config::Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_secs(60) };
    let config = outbox_only(
        Config::builder()
            .event("a", EventSettings::new("t").polling(slow))
            .event("b", EventSettings::new("t").polling(slow)),
    );
    let (hints, receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(outbox.clone());
    parts.sender = Some(Arc::new(CountingSender::default()));
    parts.wake_source = Some(Box::new(ChannelWakeSource(receiver)));
    let engine = Engine::start(parts).expect("the engine starts");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(outbox.claim_times().len(), 2, "one initial poll per type");

    let _ = hints.send(WakeUp::EventType("a".into()));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(outbox.claim_times().len(), 3);
    let _ = hints.send(WakeUp::All);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(outbox.claim_times().len(), 5, "after a reconnect every type polls at once");
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
}

/// The awake protocol of [`crate::activity`]: a run that delivered marks the type awake and runs
/// again at once; the first empty run clears the mark and claims once more after the grace, for
/// the events whose writers left out their wake-up; then the schedule takes over.
#[tokio::test(start_paused = true)]
async fn an_awake_poller_claims_again_at_once_and_once_more_after_the_grace() {
    let outbox = Arc::new(ScriptedOutbox::default());
    let config = slow_polling_of_e();
    let activity = Arc::new(PollerActivity::new());
    let (hints, receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(outbox.clone());
    parts.sender =
        Some(Arc::new(CountingSender { delay: Duration::from_millis(50), ..CountingSender::default() }));
    parts.wake_source = Some(Box::new(ChannelWakeSource(receiver)));
    parts.activity = Some(activity.clone());
    let engine = Engine::start(parts).expect("the engine starts");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!activity.is_awake("e"), "an empty first poll leaves the type asleep");
    let before = outbox.claim_times().len();

    let add = |count: u64| {
        if let Ok(mut pending) = outbox.pending.lock() {
            *pending += count;
        }
    };
    add(3);
    let woken = TokioInstant::now();
    let _ = hints.send(WakeUp::EventType("e".into()));
    tokio::time::sleep(Duration::from_millis(25)).await;
    add(2);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(activity.is_awake("e"), "delivering, and certain to claim again");
    tokio::time::sleep(Duration::from_millis(75)).await;
    assert!(!activity.is_awake("e"), "an empty claim clears the mark");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let claims = offsets_from(woken, &outbox.claim_times()[before..]);
    assert_eq!(claims, [0, 50, 100, 200], "at once after each delivery, then the grace claim");
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(
        outbox.claim_times().len(),
        before + 4,
        "after the grace claim the schedule takes over (20 s)"
    );
    engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    assert_eq!(engine.stats().delivered, 5);
    assert!(!activity.is_awake("e"));
}

/// The level and message of every log event, for the logging cases.
#[derive(Clone, Default)]
struct LogLines(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        if let Ok(mut lines) = self.0.lock() {
            lines.push((*event.metadata().level(), text.0));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_is_one_warn_line_and_an_event_that_failed_for_good_one_error_line_each() {
    use tracing_subscriber::layer::SubscriberExt;
    let lines = LogLines::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    // Three events in a batch of ten (nothing claimed ahead), once retried and once given up.
    for settings in
        [EventSettings::new("t").batch_size(10), EventSettings::new("t").batch_size(10).max_retries(0)]
    {
        let outbox = Arc::new(ScriptedOutbox::with_pending(3));
        let sender = Arc::new(CountingSender { refuse: true, ..CountingSender::default() });
        let engine = start(outbox_only(Config::builder().event("e", settings)), outbox, sender);
        tokio::time::sleep(Duration::from_millis(50)).await;
        engine.shutdown(Duration::from_secs(5)).await.expect("the engine shuts down cleanly");
    }
    let lines = lines.0.lock().map(|lines| lines.clone()).unwrap_or_default();
    let retries: Vec<&String> = lines
        .iter()
        .filter(|(level, text)| *level == tracing::Level::WARN && text.contains("they are retried"))
        .map(|(_, text)| text)
        .collect();
    assert_eq!(retries.len(), 1, "one line for the batch: {lines:?}");
    assert!(retries[0].contains("retried=3") && retries[0].contains("broker down"), "{}", retries[0]);
    let failed = lines
        .iter()
        .filter(|(level, text)| *level == tracing::Level::ERROR && text.contains("event_id="))
        .count();
    assert_eq!(failed, 3, "one line per event that failed for good: {lines:?}");
}
