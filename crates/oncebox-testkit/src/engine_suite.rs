//! The engine suite: the whole relay (pollers, retries, recovery, DLQ, clean-up) over a real
//! dialect and the in-memory broker, checked by accounting.

use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::FutureExt;
use oncebox_core::config::{Config, EventSettings, Polling};
use oncebox_core::dao::Dialect;
use oncebox_core::engine::{Engine, EngineHandle, EngineParts};
use oncebox_core::event::{DlqFilter, DlqSelection, EventStatus, OutboxEvent};
use oncebox_core::{DlqHandler, DlqStatus, NewOutboxEvent, Sender};
use uuid::Uuid;

use crate::case;
use crate::dao_suite::{dao_test, ids_of, new_events};
use crate::harness::{AgedTable, DaoHarness};
use crate::memory::MemoryBroker;
use crate::runner::{Case, Failed, TestResult, fail};

/// Every engine case.
pub fn cases<H: DaoHarness>() -> Vec<Case<H>> {
    vec![
        case!(
            "committed_events_are_delivered_and_rolled_back_events_never",
            committed_delivered_rolled_back_never
        ),
        case!("backoff_retries_after_10s_30s_90s_then_fails", backoff_then_failed),
        case!("a_stalled_worker_is_recovered_and_fenced", stalled_worker_recovered_and_fenced),
        case!("a_crash_mid_batch_loses_nothing", crash_mid_batch_loses_nothing),
        case!("failed_events_go_to_the_dlq_and_come_back", dlq_round_trip),
        case!("an_undecodable_row_fails_alone_and_reaches_the_dlq", undecodable_row_fails_alone),
        case!("clean_up_jobs_delete_only_old_rows", clean_up_jobs),
        case!("four_engines_drain_50000_events_each_once_without_errors", four_engines_drain_one_table),
        case!(
            "one_engine_with_four_loops_per_type_drains_20000_events_each_once",
            four_loops_drain_one_table
        ),
        case!("a_stalled_engine_is_fenced_by_a_second_engine", stalled_engine_fenced_by_another),
    ]
}

const EVENT: &str = "order-created";
const TOPIC: &str = "orders";

/// Polling for tests and benchmarks that drain: no initial delay, 10 ms after a full batch, at
/// most 100 ms idle.
pub fn fast_polling() -> Polling {
    Polling::Adaptive {
        initial_delay: Duration::ZERO,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
        multiplier: 2.0,
    }
}

fn event(index: usize) -> NewOutboxEvent {
    NewOutboxEvent {
        id: Uuid::now_v7(),
        event_type: EVENT.into(),
        payload: format!("{{\"order\":{index}}}"),
        payload_type: "OrderCreated".into(),
        headers: Default::default(),
        partition_key: None,
    }
}

fn events(count: usize) -> Vec<NewOutboxEvent> {
    (0..count).map(event).collect()
}

fn start<D: Dialect>(
    dialect: &D,
    config: Config,
    sender: Arc<dyn Sender>,
) -> Result<EngineHandle, libtest_mimic::Failed> {
    start_with(dialect, config, sender, None)
}

fn start_with<D: Dialect>(
    dialect: &D,
    config: Config,
    sender: Arc<dyn Sender>,
    handler: Option<Arc<dyn DlqHandler>>,
) -> Result<EngineHandle, libtest_mimic::Failed> {
    let mut parts = EngineParts::with_dialect(config, dialect);
    parts.sender = Some(sender);
    if let Some(handler) = handler {
        parts.dlq_handler = handler;
    }
    Engine::start(parts).map_err(fail)
}

/// Polls `check` until it returns true or `within` passes.
async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, oncebox_core::Error>>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await.map_err(fail)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(fail(format!("timed out after {within:?} waiting until {what}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn row<D: Dialect>(dialect: &D, id: Uuid) -> Result<OutboxEvent, libtest_mimic::Failed> {
    dialect.outbox_dao().get(id).await.map_err(fail)?.ok_or_else(|| fail(format!("row {id} is missing")))
}

async fn committed_delivered_rolled_back_never<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let mut committed = HashSet::new();
    let mut rolled_back = HashSet::new();
    for (round, size) in [1usize, 7, 120, 3, 250].into_iter().enumerate() {
        let batch = events(size);
        let commit = round != 3;
        harness.publish(&dialect, &batch, commit).await.map_err(fail)?;
        let ids = batch.iter().map(|e| e.id);
        if commit { committed.extend(ids) } else { rolled_back.extend(ids) }
    }
    let broker = MemoryBroker::new();
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).batch_size(100).polling(fast_polling()))
        .build()
        .map_err(fail)?;
    let engine = start(&dialect, config, Arc::new(broker.clone()))?;
    let expected = committed.len();
    eventually("every committed event is delivered", Duration::from_secs(30), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() >= expected) }
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;

    let counts = broker.delivery_counts();
    for id in &committed {
        assert!(counts.contains_key(id), "committed event {id} was not delivered");
    }
    for id in &rolled_back {
        assert!(!counts.contains_key(id), "rolled-back event {id} was delivered");
    }
    assert!(counts.values().all(|n| *n == 1), "no crash, so no event is sent twice");
    let totals = dialect.outbox_dao().counts().await.map_err(fail)?;
    assert_eq!(totals.status_total(EventStatus::Processed), expected as u64);
    assert_eq!(totals.total(), expected as u64, "rolled-back rows never existed");
    let sample = row(&dialect, *committed.iter().next().ok_or_else(|| fail("empty"))?).await?;
    assert_eq!(sample.attempts, 1);
    assert!(sample.processed_at.is_some());
    assert_eq!(engine.stats().delivered, expected as u64);
    harness.dispose(dialect).await.map_err(fail)
}

/// Waits until `broker` has acknowledged `count` distinct events and `count` rows are PROCESSED:
/// a broker acknowledges before the engine settles, so a check of the rows must wait for both.
async fn delivered_and_settled<D: Dialect>(broker: &MemoryBroker, dialect: &D, count: usize) -> TestResult {
    eventually(&format!("{count} events are delivered"), Duration::from_secs(20), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() == count) }
    })
    .await?;
    eventually(&format!("{count} rows are settled as PROCESSED"), Duration::from_secs(20), || async {
        Ok(dialect.outbox_dao().counts().await?.status_total(EventStatus::Processed) == count as u64)
    })
    .await
}

async fn wait_for_attempts<D: Dialect>(
    dialect: &D,
    id: Uuid,
    attempts: u32,
) -> Result<OutboxEvent, libtest_mimic::Failed> {
    eventually(&format!("the event has {attempts} attempts"), Duration::from_secs(20), || async move {
        Ok(dialect
            .outbox_dao()
            .get(id)
            .await?
            .is_some_and(|r| r.attempts >= attempts && r.status != EventStatus::InProcess))
    })
    .await?;
    row(dialect, id).await
}

async fn backoff_then_failed<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(1);
    let id = published[0].id;
    harness.publish(&dialect, &published, true).await.map_err(fail)?;
    let broker = MemoryBroker::new();
    broker.set_down(true);
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(fast_polling()))
        .build()
        .map_err(fail)?;
    let engine = start(&dialect, config, Arc::new(broker.clone()))?;
    for (attempts, expected_delay) in [(1u32, 10i64), (2, 30), (3, 90)] {
        let retried = wait_for_attempts(&dialect, id, attempts).await?;
        assert_eq!(retried.status, EventStatus::Pending, "after {attempts} failed sends");
        assert_eq!(retried.attempts, attempts);
        let delay = (retried.next_retry_at - retried.updated_at).num_milliseconds();
        assert!(
            (expected_delay * 1000 - 50..=expected_delay * 1000 + 50).contains(&delay),
            "retry {attempts} waits {delay} ms, expected {expected_delay} s"
        );
        assert!(
            retried.last_error.as_deref().is_some_and(|e| e.contains("down")),
            "{:?}",
            retried.last_error
        );
        // Make the retry due now instead of waiting for it.
        harness
            .backdate(&dialect, AgedTable::Events, &[id], Duration::from_secs(expected_delay as u64 + 1))
            .await
            .map_err(fail)?;
        engine.wake(EVENT);
    }
    let failed = wait_for_attempts(&dialect, id, 4).await?;
    assert_eq!(failed.status, EventStatus::Failed, "1 + max-retries (3) sends, then FAILED");
    assert_eq!(failed.attempts, 4);
    assert!(broker.delivered().is_empty());
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    harness.dispose(dialect).await.map_err(fail)
}

fn recovering_config() -> Result<Config, libtest_mimic::Failed> {
    Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(fast_polling()))
        .emergency_timeout(Duration::from_secs(1))
        .stuck_recovery(Duration::from_secs(2), fast_polling())
        .build()
        .map_err(fail)
}

async fn stalled_worker_recovered_and_fenced<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(10);
    let ids: Vec<Uuid> = published.iter().map(|e| e.id).collect();
    harness.publish(&dialect, &published, true).await.map_err(fail)?;
    // A worker claims the batch, then stalls past max-batch-processing-time.
    let stalled = dialect.outbox_dao().claim(EVENT, 100).await.map_err(fail)?;
    assert_eq!(stalled.len(), 10);
    harness.backdate(&dialect, AgedTable::Events, &ids, Duration::from_secs(600)).await.map_err(fail)?;

    let broker = MemoryBroker::new();
    let engine = start(&dialect, recovering_config()?, Arc::new(broker.clone()))?;
    eventually("the recovered batch is delivered by the engine", Duration::from_secs(20), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() == 10) }
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    assert!(engine.stats().recovered >= 10);

    // The stalled worker wakes up and tries to settle its old claim as failed: refused.
    let late: Vec<_> =
        ids.iter().map(|id| oncebox_core::Settlement::Failed { id: *id, error: "late".into() }).collect();
    let report = dialect.outbox_dao().settle(&stalled, &late).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (0, 10));
    for id in &ids {
        let row = row(&dialect, *id).await?;
        assert_eq!(row.status, EventStatus::Processed, "the new claimer's outcome stands");
        assert_eq!(row.attempts, 1, "recovery does not count an attempt");
    }
    harness.dispose(dialect).await.map_err(fail)
}

async fn crash_mid_batch_loses_nothing<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(50);
    let ids: Vec<Uuid> = published.iter().map(|e| e.id).collect();
    harness.publish(&dialect, &published, true).await.map_err(fail)?;

    // The first instance claims a batch and "crashes" while the broker has not acknowledged it.
    let hanging = MemoryBroker::new();
    hanging.set_send_delay(Duration::from_secs(3600));
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).batch_size(20).polling(fast_polling()))
        .build()
        .map_err(fail)?;
    let first = start(&dialect, config, Arc::new(hanging.clone()))?;
    eventually("the first instance has claimed a batch", Duration::from_secs(10), || {
        let hanging = hanging.clone();
        async move { Ok(hanging.batches() >= 1) }
    })
    .await?;
    let aborted = first.shutdown(Duration::from_millis(50)).await;
    assert!(aborted.is_err(), "the in-flight batch cannot settle before the deadline");
    let in_process = dialect.outbox_dao().counts().await.map_err(fail)?.status_total(EventStatus::InProcess);
    // The batch being sent, and the one claimed ahead of it when that claim finished in time.
    let claimed = first.stats().claimed;
    assert!(claimed == 20 || claimed == 40, "{claimed} rows claimed in batches of 20");
    assert_eq!(in_process, claimed, "the crashed batches are left IN_PROCESS");

    // A restarted instance recovers the stuck rows once they are old enough, and delivers all.
    harness.backdate(&dialect, AgedTable::Events, &ids, Duration::from_secs(600)).await.map_err(fail)?;
    let broker = MemoryBroker::new();
    let second = start(&dialect, recovering_config()?, Arc::new(broker.clone()))?;
    eventually("every event is delivered after the restart", Duration::from_secs(20), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() == 50) }
    })
    .await?;
    second.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    let counts = broker.delivery_counts();
    assert!(ids.iter().all(|id| counts.contains_key(id)), "at least once, across the crash");
    harness.dispose(dialect).await.map_err(fail)
}

#[derive(Default)]
struct RecordingHandler {
    moved: Mutex<Vec<Uuid>>,
}

#[async_trait]
impl DlqHandler for RecordingHandler {
    async fn handle(&self, moved: &[OutboxEvent]) {
        if let Ok(mut ids) = self.moved.lock() {
            ids.extend(moved.iter().map(|e| e.id));
        }
    }
}

async fn dlq_round_trip<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(3);
    let poison = published[1].id;
    harness.publish(&dialect, &published, true).await.map_err(fail)?;
    let broker = MemoryBroker::new();
    broker.reject(poison);
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).max_retries(1).polling(fast_polling()))
        .default_backoff(oncebox_core::config::Backoff { enabled: false, ..Default::default() })
        .dlq_enabled(true)
        .dlq_polling(fast_polling())
        .build()
        .map_err(fail)?;
    let handler = Arc::new(RecordingHandler::default());
    let engine = start_with(&dialect, config, Arc::new(broker.clone()), Some(handler.clone()))?;
    let dlq = dialect.dlq_dao();
    eventually("the poison event reaches the DLQ", Duration::from_secs(20), || {
        let dlq = dlq.clone();
        async move { Ok(dlq.get(poison).await?.is_some()) }
    })
    .await?;
    let moved = dlq.get(poison).await.map_err(fail)?.ok_or_else(|| fail("missing DLQ row"))?;
    assert_eq!(moved.dlq_status, DlqStatus::Moved);
    assert_eq!(moved.event.attempts, 2, "1 + max-retries (1) sends");
    assert!(dialect.outbox_dao().get(poison).await.map_err(fail)?.is_none(), "moved, not copied");
    eventually("the DLQ handler saw the move", Duration::from_secs(5), || {
        let handler = handler.clone();
        async move { Ok(handler.moved.lock().map(|m| m.contains(&poison)).unwrap_or(false)) }
    })
    .await?;

    // A person fixes the cause and asks for a retry.
    broker.accept(poison);
    let changed = dlq.set_status(&DlqSelection::Ids(vec![poison]), DlqStatus::ToRetry).await.map_err(fail)?;
    assert_eq!(changed, 1);
    eventually("the re-driven event is delivered", Duration::from_secs(20), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().contains_key(&poison)) }
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 0);
    let redriven = row(&dialect, poison).await?;
    assert_eq!(redriven.status, EventStatus::Processed);
    assert_eq!(redriven.attempts, 1, "attempts restart from 0 when re-driven");
    assert_eq!(broker.delivery_counts().len(), 3);
    harness.dispose(dialect).await.map_err(fail)
}

/// Valid JSON, but not the object of strings the `headers` column must hold.
const BAD_HEADERS: &str = r#"{"retries":3}"#;

async fn undecodable_row_fails_alone<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(5);
    let bad = published[0].id;
    harness.publish(&dialect, &published, true).await.map_err(fail)?;
    // The oldest row, first in every claim, is one the relay cannot read.
    harness.overwrite_headers(&dialect, AgedTable::Events, bad, BAD_HEADERS).await.map_err(fail)?;

    let broker = MemoryBroker::new();
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(fast_polling()))
        .build()
        .map_err(fail)?;
    let engine = start(&dialect, config, Arc::new(broker.clone()))?;
    eventually("the healthy rows are delivered and the bad one FAILED", Duration::from_secs(20), || async {
        let counts = dialect.outbox_dao().counts().await?;
        Ok(counts.status_total(EventStatus::Processed) == 4 && counts.status_total(EventStatus::Failed) == 1)
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    let delivered = broker.delivery_counts();
    assert!(!delivered.contains_key(&bad), "an undecodable row is never sent");
    for event in &published[1..] {
        assert_eq!(delivered.get(&event.id), Some(&1), "healthy event {} is delivered once", event.id);
    }
    // Readable again once repaired: the row says which column of which row could not be read.
    harness.overwrite_headers(&dialect, AgedTable::Events, bad, "{}").await.map_err(fail)?;
    let failed = row(&dialect, bad).await?;
    assert_eq!(failed.status, EventStatus::Failed);
    assert_eq!(failed.attempts, 0, "the event was never sent");
    assert_eq!(failed.claim_token, None);
    let last_error = failed.last_error.unwrap_or_default();
    assert!(last_error.contains("headers") && last_error.contains(&bad.to_string()), "{last_error}");

    // With the DLQ on, the FAILED row moves there like any other, bad headers and all.
    harness.overwrite_headers(&dialect, AgedTable::Events, bad, BAD_HEADERS).await.map_err(fail)?;
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(fast_polling()))
        .dlq_enabled(true)
        .dlq_polling(fast_polling())
        .build()
        .map_err(fail)?;
    let engine = start(&dialect, config, Arc::new(broker.clone()))?;
    let dlq = dialect.dlq_dao();
    eventually("the undecodable row reaches the DLQ", Duration::from_secs(20), || {
        let dlq = dlq.clone();
        async move { Ok(dlq.count(&DlqFilter::default()).await? == 1) }
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    assert_eq!(dialect.outbox_dao().counts().await.map_err(fail)?.status_total(EventStatus::Failed), 0);
    let unreadable = dlq.get(bad).await.err().map(|error| error.to_string()).unwrap_or_default();
    assert!(unreadable.contains("headers") && unreadable.contains(&bad.to_string()), "{unreadable}");
    let listed = dlq.list(&DlqFilter::default(), 0, 10).await.map_err(fail)?;
    assert!(listed.is_empty(), "a row that cannot be read does not break the listing");
    harness.overwrite_headers(&dialect, AgedTable::Dlq, bad, "{}").await.map_err(fail)?;
    let moved = dlq.get(bad).await.map_err(fail)?.ok_or_else(|| fail("missing DLQ row"))?;
    assert_eq!(moved.dlq_status, DlqStatus::Moved);
    assert_eq!(moved.event.status, EventStatus::Failed);
    assert!(moved.event.last_error.is_some_and(|error| error.contains("headers")));
    harness.dispose(dialect).await.map_err(fail)
}

async fn clean_up_jobs<H: DaoHarness>(harness: Arc<H>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let published = events(5);
    let ids: Vec<Uuid> = published.iter().map(|e| e.id).collect();
    harness.publish(&dialect, &published, true).await.map_err(fail)?;
    let consumed: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    dialect.inbox_dao().record_many("billing", &consumed).await.map_err(fail)?;

    let broker = MemoryBroker::new();
    let hour = Duration::from_secs(3600);
    let config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(fast_polling()))
        .processed_clean_up(Some((hour, fast_polling())))
        .inbox_enabled(true)
        .inbox_clean_up(Some((hour, fast_polling())))
        .build()
        .map_err(fail)?;
    let engine = start(&dialect, config, Arc::new(broker.clone()))?;
    delivered_and_settled(&broker, &dialect, 5).await?;
    harness.backdate(&dialect, AgedTable::Events, &ids[..3], 2 * hour).await.map_err(fail)?;
    harness.backdate(&dialect, AgedTable::Consumed, &consumed[..2], 2 * hour).await.map_err(fail)?;
    eventually("old processed rows are cleaned up", Duration::from_secs(20), || async {
        Ok(dialect.outbox_dao().counts().await?.total() == 2)
    })
    .await?;
    eventually("old inbox records are cleaned up", Duration::from_secs(20), || async {
        Ok(dialect.inbox_dao().consumed("billing", &consumed).await?.len() == 1)
    })
    .await?;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    for id in &ids[3..] {
        assert!(dialect.outbox_dao().get(*id).await.map_err(fail)?.is_some(), "recent rows stay");
    }
    harness.dispose(dialect).await.map_err(fail)
}

// ---- several instances ------------------------------------------------------------------------

dao_test! {
    four_engines_drain_one_table => four_engines_drain;
    four_loops_drain_one_table => four_loops_drain;
    stalled_engine_fenced_by_another => stalled_engine_fenced;
}

/// The backend cannot run a second instance: said on stderr, so a run that left the case out
/// shows it.
fn skipped(case: &str, dialect: &impl Dialect) -> TestResult {
    eprintln!("SKIPPED: {case}: the {} harness gives no second instance", dialect.name());
    Ok(())
}

async fn four_engines_drain<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    const TYPES: [&str; 3] = ["order-created", "payment-received", "order-shipped"];
    let mut instances = Vec::new();
    for _ in 0..4 {
        match harness.another_instance(dialect).await.map_err(fail)? {
            Some(instance) => instances.push(instance),
            None => return skipped("four_engines_drain_50000_events_each_once_without_errors", dialect),
        }
    }
    let mut published = HashSet::new();
    for round in 0..50 {
        let events = new_events(TYPES[round % 3], 1000);
        published.extend(ids_of(&events));
        harness.publish(dialect, &events, true).await.map_err(fail)?;
    }
    let broker = MemoryBroker::new();
    let mut builder = Config::builder();
    for event_type in TYPES {
        builder =
            builder.event(event_type, EventSettings::new(TOPIC).batch_size(250).polling(fast_polling()));
    }
    let config = builder.build().map_err(fail)?;
    let mut engines = Vec::new();
    for instance in &instances {
        engines.push(start(instance, config.clone(), Arc::new(broker.clone()))?);
    }
    let drained = eventually("50,000 events are delivered", Duration::from_secs(300), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() >= 50_000) }
    })
    .await;
    let mut stats = Vec::new();
    for engine in engines {
        engine.shutdown(Duration::from_secs(30)).await.map_err(fail)?;
        stats.push(engine.stats());
    }
    for instance in instances {
        harness.close_instance(instance).await.map_err(fail)?;
    }
    drained?;
    let counts = broker.delivery_counts();
    assert_eq!(counts.len(), 50_000);
    assert!(published.iter().all(|id| counts.contains_key(id)), "every published id is delivered");
    let twice = counts.values().filter(|n| **n > 1).count();
    assert_eq!(twice, 0, "no crash, so no id is sent twice");
    assert_eq!(stats.iter().map(|s| s.claimed).sum::<u64>(), 50_000, "claims never overlap: {stats:?}");
    assert_eq!(stats.iter().map(|s| s.task_errors).sum::<u64>(), 0, "no deadlock or lock wait: {stats:?}");
    assert!(stats.iter().filter(|s| s.claimed > 0).count() >= 2, "the work was shared: {stats:?}");
    let totals = dialect.outbox_dao().counts().await.map_err(fail)?;
    assert_eq!(totals.status_total(EventStatus::Processed), 50_000);
    Ok(())
}

/// `concurrency: 4` in one engine: the loops share the work and their claims never overlap.
async fn four_loops_drain<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let mut published = HashSet::new();
    for _ in 0..20 {
        let events = new_events(EVENT, 1000);
        published.extend(ids_of(&events));
        harness.publish(dialect, &events, true).await.map_err(fail)?;
    }
    let broker = MemoryBroker::new();
    let settings = EventSettings::new(TOPIC).batch_size(100).concurrency(4).polling(fast_polling());
    let config = Config::builder().thread_pool_size(4).event(EVENT, settings).build().map_err(fail)?;
    let engine = start(dialect, config, Arc::new(broker.clone()))?;
    let drained = eventually("20,000 events are delivered", Duration::from_secs(300), || {
        let broker = broker.clone();
        async move { Ok(broker.delivery_counts().len() >= 20_000) }
    })
    .await;
    engine.shutdown(Duration::from_secs(30)).await.map_err(fail)?;
    drained?;
    let stats = engine.stats();
    let counts = broker.delivery_counts();
    assert_eq!(counts.len(), 20_000);
    assert!(published.iter().all(|id| counts.contains_key(id)), "every published id is delivered");
    assert_eq!(counts.values().filter(|n| **n > 1).count(), 0, "no crash, so no id is sent twice");
    assert_eq!(stats.claimed, 20_000, "claims never overlap: {stats:?}");
    assert_eq!(stats.task_errors, 0, "no deadlock or lock wait: {stats:?}");
    let totals = dialect.outbox_dao().counts().await.map_err(fail)?;
    assert_eq!(totals.status_total(EventStatus::Processed), 20_000);
    Ok(())
}

/// A polling schedule that never runs within a case.
fn never() -> Polling {
    Polling::Fixed { initial_delay: Duration::from_secs(3600), delay: Duration::from_secs(3600) }
}

/// After a short or failed poll the next one is 10 s away.
fn slow() -> Polling {
    Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_secs(10) }
}

async fn stalled_engine_fenced<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let Some(stalled_instance) = harness.another_instance(dialect).await.map_err(fail)? else {
        return skipped("a_stalled_engine_is_fenced_by_a_second_engine", dialect);
    };
    let published = events(10);
    let ids = ids_of(&published);
    harness.publish(dialect, &published, true).await.map_err(fail)?;
    // The first engine's broker answers only when released, after the second engine has taken
    // the batch over. Its own stuck recovery never runs: on MySQL that job's UPDATE can lock rows
    // it scans, which a claim running at the same moment skips (SKIP LOCKED) or deadlocks on, so
    // the first claim could come back short, empty or failed. After a short poll the poller
    // sleeps 10 s, so it cannot claim the batch back in this case.
    let stalling = MemoryBroker::new();
    stalling.hold();
    let stalled_config = Config::builder()
        .event(EVENT, EventSettings::new(TOPIC).polling(slow()))
        .emergency_timeout(Duration::from_secs(30))
        .stuck_recovery(Duration::from_secs(3600), never())
        .build()
        .map_err(fail)?;
    let stalled = start(&stalled_instance, stalled_config, Arc::new(stalling.clone()))?;
    let rescuer = std::sync::OnceLock::new();
    let outcome = async {
        eventually(
            "the first engine has claimed all 10 events and is sending them",
            Duration::from_secs(30),
            || {
                let (stalled, stalling) = (stalled.clone(), stalling.clone());
                async move {
                    let claimed = stalled.stats().claimed;
                    if claimed == 0 {
                        // A claim that failed or found nothing would put the next poll 10 s away.
                        stalled.wake(EVENT);
                    }
                    Ok(claimed == 10 && stalling.batches() >= 1)
                }
            },
        )
        .await?;

        // The second engine considers a batch stuck after 2 s.
        let healthy = MemoryBroker::new();
        let _ = rescuer.set(start(dialect, recovering_config()?, Arc::new(healthy.clone()))?);
        delivered_and_settled(&healthy, dialect, 10).await?;
        // Only now does the stalled engine's send return, so its settle comes after the second
        // engine's outcome and must not overwrite it.
        stalling.release();
        eventually("the stalled engine's late settle is refused", Duration::from_secs(20), || {
            let stalled = stalled.clone();
            async move { Ok(stalled.stats().refused_settles >= 10) }
        })
        .await?;
        for id in &ids {
            let row = row(dialect, *id).await?;
            assert_eq!(row.status, EventStatus::Processed, "the second engine's outcome stands");
            assert_eq!(row.attempts, 1, "recovery and the refused settle count no attempt");
        }
        let stats = stalled.stats();
        assert_eq!((stats.claimed, stats.refused_settles), (10, 10), "one claim, refused whole: {stats:?}");
        Ok::<_, Failed>(())
    }
    .await;
    stalling.release();
    stalled.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    if let Some(rescuer) = rescuer.get() {
        rescuer.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    }
    harness.close_instance(stalled_instance).await.map_err(fail)?;
    outcome
}
