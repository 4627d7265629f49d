//! The inbox listener against a real Kafka-protocol broker (`ONCEBOX_KAFKA_BOOTSTRAP`, default
//! `127.0.0.1:9092` under `CI=true`) with the SQLite inbox. Every test uses its own topics and
//! consumer group; what was committed is read back from the group coordinator, never from
//! watermarks.

mod support;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncebox_core::event::{HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_PAYLOAD_TYPE};
use oncebox_core::{
    Deadline, Dialect, Error, ErrorKind, Headers, Inbox, OutboundMessage, SchemaPlan, Sender,
};
use oncebox_kafka::{
    HEADER_DEAD_LETTER_REASON, HEADER_DEAD_LETTER_SOURCE, KafkaEvent, KafkaListener, KafkaListenerConfig,
    KafkaOutcome, KafkaSender, KafkaSenderConfig,
};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail};
use oncebox_testkit::{Background, case, eventually};
use rdkafka::producer::FutureProducer;
use serde::Deserialize;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use support::{
    committed_offset, committed_offset_at, create_topics_with_partitions, fresh_name, log_lines, produce_raw,
    produce_raw_to, raw_producer, read_topic,
};

const EVENT_TYPE: &str = "order-created";
/// How long to wait for something the test expects before giving up.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct OrderCreated {
    index: u32,
}

struct Harness {
    bootstrap: String,
}

/// What the effect does: count its runs, fail the first `fail_first` (and every run while `shut`),
/// and keep what it received.
#[derive(Default)]
struct Effect {
    calls: AtomicUsize,
    fail_first: usize,
    shut: AtomicBool,
    received: Mutex<Vec<KafkaEvent<OrderCreated>>>,
}

impl Effect {
    fn failing(fail_first: usize) -> Arc<Self> {
        Arc::new(Self { fail_first, ..Self::default() })
    }

    /// Fails its first `fail_first` runs, and every run until [`open`](Self::open)ed.
    fn shut(fail_first: usize) -> Arc<Self> {
        Arc::new(Self { fail_first, shut: AtomicBool::new(true), ..Self::default() })
    }

    fn open(&self) {
        self.shut.store(false, Ordering::SeqCst);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Topics, a consumer group, an inbox database and a running listener.
struct Fixture {
    bootstrap: String,
    topic: String,
    dead_letter_topic: Option<String>,
    /// Runs after which a failing record is given up (`None`: never).
    max_attempts: Option<u32>,
    group: String,
    database: PathBuf,
    inbox: Inbox<()>,
    outcomes: broadcast::Receiver<KafkaOutcome>,
    running: Option<Background<oncebox_core::Result<()>>>,
}

impl Fixture {
    /// Fresh single-partition topics (and a dead-letter topic when `dead_letter`), then a listener
    /// in a fresh group.
    async fn start(harness: &Harness, effect: Arc<Effect>, dead_letter: bool) -> Result<Self, Failed> {
        Self::start_with_partitions(harness, effect, dead_letter, 1).await
    }

    async fn start_with_partitions(
        harness: &Harness,
        effect: Arc<Effect>,
        dead_letter: bool,
        partitions: i32,
    ) -> Result<Self, Failed> {
        let mut fixture = Self::prepare(harness, dead_letter, partitions).await?;
        fixture.listen(effect).map_err(fail)?;
        Ok(fixture)
    }

    /// The topics, group and inbox of [`start_with_partitions`](Self::start_with_partitions),
    /// with no listener yet.
    async fn prepare(harness: &Harness, dead_letter: bool, partitions: i32) -> Result<Self, Failed> {
        let topic = fresh_name("orders");
        let dead_letter_topic = dead_letter.then(|| fresh_name("orders-dlt"));
        let mut topics = vec![topic.as_str()];
        topics.extend(dead_letter_topic.as_deref());
        create_topics_with_partitions(&harness.bootstrap, &topics, partitions).await.map_err(fail)?;
        let group = fresh_name("billing");
        let database = std::env::temp_dir().join(format!("{group}.db"));
        let dialect = SqliteDialect::connect(&database.to_string_lossy()).await.map_err(fail)?;
        dialect
            .create_schema(SchemaPlan { outbox: false, dlq: false, inbox: true, jobs: false })
            .await
            .map_err(fail)?;
        let inbox: Inbox<()> = Inbox::new("billing", dialect.inbox_dao(), ());
        Ok(Self {
            bootstrap: harness.bootstrap.clone(),
            topic,
            dead_letter_topic,
            max_attempts: None,
            group,
            database,
            inbox,
            outcomes: broadcast::channel(1).1,
            running: None,
        })
    }

    fn config(&self) -> KafkaListenerConfig {
        let config =
            KafkaListenerConfig::new(self.bootstrap.clone(), self.group.clone(), [self.topic.clone()])
                .with_retry_backoff(Duration::from_millis(50), Duration::from_millis(200))
                .with_shutdown_grace(Duration::from_secs(10));
        let config = match self.max_attempts {
            Some(attempts) => config.with_max_attempts(attempts),
            None => config,
        };
        match &self.dead_letter_topic {
            Some(topic) => config.with_dead_letter_topic(topic.clone()),
            None => config,
        }
    }

    /// Starts a listener in the fixture's group whose effect is `effect`, through the inbox.
    fn listen(&mut self, effect: Arc<Effect>) -> oncebox_core::Result<()> {
        let running = self.spawn(effect)?;
        self.outcomes = running.outcomes;
        self.running = Some(running.running);
        Ok(())
    }

    /// Starts another member of the fixture's group, with the same inbox.
    fn spawn(&self, effect: Arc<Effect>) -> oncebox_core::Result<Running> {
        let listener = KafkaListener::builder(self.config())
            .on_once(EVENT_TYPE, self.inbox.clone(), move |event: KafkaEvent<OrderCreated>| {
                let effect = effect.clone();
                async move {
                    let call = effect.calls.fetch_add(1, Ordering::SeqCst);
                    if call < effect.fail_first || effect.shut.load(Ordering::SeqCst) {
                        return Err(Error::temporary(
                            ErrorKind::Other,
                            format!("effect for order {} failed on purpose", event.payload.index),
                        ));
                    }
                    effect.received.lock().map_err(|_| Error::new(ErrorKind::Other, "poisoned"))?.push(event);
                    Ok(())
                }
            })
            .build()?;
        let outcomes = listener.outcomes();
        let running = Background::spawn(|shutdown| async move { listener.run(shutdown).await });
        Ok(Running { outcomes, running })
    }

    /// Starts a listener in the fixture's group with a transactional handler (`on_in`) over the
    /// fixture's database: it writes a row of an `effects` table in the inbox's transaction,
    /// failing the first `effect.fail_first` runs after writing it (so their rows must roll back
    /// with their inbox records). Returns the dialect, to read the effects.
    async fn listen_in(&mut self, effect: Arc<Effect>) -> Result<SqliteDialect, Failed> {
        let dialect = SqliteDialect::connect(&self.database.to_string_lossy()).await.map_err(fail)?;
        oncebox_sqlite::sqlx::query("CREATE TABLE effects (event_id TEXT PRIMARY KEY, idx INTEGER NOT NULL)")
            .execute(dialect.pool())
            .await
            .map_err(fail)?;
        let inbox = Inbox::new("billing", dialect.inbox_dao(), dialect.writer());
        let listener = KafkaListener::builder(self.config())
            .on_in(EVENT_TYPE, inbox, dialect.clone(), move |tx, event: KafkaEvent<OrderCreated>| {
                let effect = effect.clone();
                Box::pin(async move {
                    let call = effect.calls.fetch_add(1, Ordering::SeqCst);
                    oncebox_sqlite::sqlx::query("INSERT INTO effects (event_id, idx) VALUES (?, ?)")
                        .bind(event.id.to_string())
                        .bind(event.payload.index)
                        .execute(&mut **tx)
                        .await?;
                    if call < effect.fail_first {
                        return Err(
                            format!("effect for order {} failed on purpose", event.payload.index).into()
                        );
                    }
                    Ok(())
                })
            })
            .build()
            .map_err(fail)?;
        self.outcomes = listener.outcomes();
        self.running = Some(Background::spawn(|shutdown| async move { listener.run(shutdown).await }));
        Ok(dialect)
    }

    /// Stops the listener; the outcomes it reported stay readable.
    async fn stop(&mut self) -> TestResult {
        match self.running.take() {
            Some(running) => running.stop().await?.map_err(fail),
            None => Ok(()),
        }
    }

    fn sender(&self) -> Result<KafkaSender, Failed> {
        KafkaSender::new(KafkaSenderConfig::new(self.bootstrap.clone())).map_err(fail)
    }

    async fn send(&self, sender: &KafkaSender, message: &OutboundMessage) -> TestResult {
        match sender.send(std::slice::from_ref(message), Deadline::after(WAIT)).await.pop() {
            Some(Ok(())) => Ok(()),
            Some(Err(error)) => Err(fail(format!("could not send {}: {error}", message.id))),
            None => Err(fail("no result for a one-message batch")),
        }
    }

    fn message(&self, index: u32) -> OutboundMessage {
        let id = Uuid::now_v7();
        OutboundMessage {
            id,
            event_type: EVENT_TYPE.to_owned(),
            topic: self.topic.clone(),
            key: format!("customer-{index}"),
            payload: format!("{{\"index\":{index}}}"),
            payload_type: "OrderCreated".to_owned(),
            headers: Headers::from([("traceparent".to_owned(), format!("00-trace-{index}-01"))]),
            created_at: chrono::Utc::now(),
        }
    }

    async fn next_outcome(&mut self) -> Result<KafkaOutcome, Failed> {
        match tokio::time::timeout(WAIT, self.outcomes.recv()).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(error)) => Err(fail(format!("outcome stream: {error}"))),
            Err(_) => Err(fail(format!("gave up waiting: no listener outcome within {WAIT:?}"))),
        }
    }

    /// Outcomes reported but not read yet (after `stop`, that is all of them).
    fn remaining_outcomes(&mut self) -> Vec<KafkaOutcome> {
        std::iter::from_fn(|| self.outcomes.try_recv().ok()).collect()
    }

    fn committed(&self) -> Result<Option<i64>, Failed> {
        committed_offset(&self.bootstrap, &self.group, &self.topic).map_err(fail)
    }
}

/// A listener task and what it reports.
struct Running {
    outcomes: broadcast::Receiver<KafkaOutcome>,
    running: Background<oncebox_core::Result<()>>,
}

impl Running {
    async fn stop(self) -> TestResult {
        self.running.stop().await?.map_err(fail)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.abort();
        }
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.database.to_string_lossy()));
        }
    }
}

async fn a_typed_handler_receives_the_decoded_event(harness: Arc<Harness>) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let message = fixture.message(7);
    fixture.send(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: message.id });
    let received = effect.received.lock().map_err(fail)?.clone();
    let [event] = received.as_slice() else {
        return Err(fail(format!("expected one event, got {received:?}")));
    };
    assert_eq!(event.id, message.id);
    assert_eq!(event.event_type, EVENT_TYPE);
    assert_eq!(event.payload_type.as_deref(), Some("OrderCreated"));
    assert_eq!(event.source.key.as_deref(), Some("customer-7"));
    assert_eq!(event.source.topic, fixture.topic);
    assert_eq!(event.headers.get("traceparent").map(String::as_str), Some("00-trace-7-01"));
    assert_eq!(event.payload, OrderCreated { index: 7 });
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, Some(event.source.offset + 1), "the handled record was committed");
    Ok(())
}

async fn a_duplicate_record_has_its_effect_once(harness: Arc<Harness>) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let message = fixture.message(1);
    fixture.send(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: message.id });
    // The same event again, as the relay sends it after a lost delivery report.
    fixture.send(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Duplicate { id: message.id });
    assert_eq!(effect.calls(), 1, "the effect ran once");
    assert!(fixture.inbox.is_consumed(message.id).await.map_err(fail)?);
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, Some(2), "both records were committed");
    Ok(())
}

async fn a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Effect::failing(1);
    let mut fixture = Fixture::prepare(&harness, false, 1).await?;
    let dialect = fixture.listen_in(effect.clone()).await?;
    let sender = fixture.sender()?;
    let message = fixture.message(3);
    fixture.send(&sender, &message).await?;
    let first = fixture.next_outcome().await?;
    assert!(
        matches!(&first, KafkaOutcome::Retrying { id, attempts: 1, .. } if *id == message.id),
        "{first:?}"
    );
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: message.id });
    // The same event again, as the relay sends it after a lost delivery report.
    fixture.send(&sender, &message).await?;
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Duplicate { id: message.id });
    assert_eq!(effect.calls(), 2, "the failed run and the applied one; not the duplicate");
    let rows: i64 = oncebox_sqlite::sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE event_id = ?")
        .bind(message.id.to_string())
        .fetch_one(dialect.pool())
        .await
        .map_err(fail)?;
    assert_eq!(rows, 1, "the failed run's row was rolled back with its inbox record");
    assert!(fixture.inbox.is_consumed(message.id).await.map_err(fail)?);
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, Some(2), "both records were committed");
    Ok(())
}

async fn a_failing_handler_is_retried_in_order_and_committed_after_success(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Effect::failing(2);
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let batch = [fixture.message(1), fixture.message(2), fixture.message(3)];
    // One pipelined batch, so the records share a record batch on the broker: the retry must not
    // depend on fetching from the middle of one again.
    let results = sender.send(&batch, Deadline::after(WAIT)).await;
    if let Some(error) = results.iter().find_map(|result| result.as_ref().err()) {
        return Err(fail(format!("could not send the batch: {error}")));
    }
    let [first, second, third] = &batch;
    for attempts in 1..=2 {
        let outcome = fixture.next_outcome().await?;
        assert!(
            matches!(&outcome, KafkaOutcome::Retrying { id, attempts: a, .. } if *id == first.id && *a == attempts),
            "{outcome:?}"
        );
    }
    // The later records of the partition waited behind the first.
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: first.id });
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: second.id });
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: third.id });
    let order: Vec<Uuid> = effect.received.lock().map_err(fail)?.iter().map(|event| event.id).collect();
    assert_eq!(order, [first.id, second.id, third.id]);
    assert_eq!(effect.calls(), 5);
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, Some(3));
    Ok(())
}

async fn a_record_whose_handler_keeps_failing_is_not_committed_and_comes_again(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Effect::failing(usize::MAX);
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let message = fixture.message(3);
    let behind = fixture.message(4);
    let results = sender.send(&[message.clone(), behind.clone()], Deadline::after(WAIT)).await;
    if let Some(error) = results.iter().find_map(|result| result.as_ref().err()) {
        return Err(fail(format!("could not send the batch: {error}")));
    }
    for attempts in 1..=3 {
        let outcome = fixture.next_outcome().await?;
        assert!(
            matches!(&outcome, KafkaOutcome::Retrying { id, attempts: a, .. } if *id == message.id && *a == attempts),
            "{outcome:?}"
        );
    }
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, None, "a record whose handler never succeeded was committed");
    assert!(!fixture.inbox.is_consumed(message.id).await.map_err(fail)?, "a failed effect is not recorded");

    // A new listener in the same group gets the record again, and this time the effect succeeds.
    let healthy = Arc::new(Effect::default());
    fixture.listen(healthy.clone()).map_err(fail)?;
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: message.id });
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: behind.id });
    fixture.stop().await?;
    assert_eq!(healthy.calls(), 2);
    assert_eq!(fixture.committed()?, Some(2));
    Ok(())
}

async fn a_record_that_fails_max_attempts_times_is_dead_lettered_and_the_partition_goes_on(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Effect::failing(2);
    let mut fixture = Fixture::prepare(&harness, true, 1).await?;
    fixture.max_attempts = Some(2);
    fixture.listen(effect.clone()).map_err(fail)?;
    let dead_letter_topic = fixture.dead_letter_topic.clone().ok_or_else(|| fail("no dead-letter topic"))?;
    let sender = fixture.sender()?;
    let failing = fixture.message(8);
    let behind = fixture.message(9);
    let results = sender.send(&[failing.clone(), behind.clone()], Deadline::after(WAIT)).await;
    if let Some(error) = results.iter().find_map(|result| result.as_ref().err()) {
        return Err(fail(format!("could not send the batch: {error}")));
    }
    let outcome = fixture.next_outcome().await?;
    assert!(
        matches!(&outcome, KafkaOutcome::Retrying { id, attempts: 1, .. } if *id == failing.id),
        "{outcome:?}"
    );
    match fixture.next_outcome().await? {
        KafkaOutcome::DeadLettered { id: Some(id), to, reason }
            if id == failing.id && to == dead_letter_topic =>
        {
            assert!(reason.contains("gave up after 2 attempts"), "{reason}");
        }
        other => return Err(fail(format!("the record was not given up after 2 attempts: {other:?}"))),
    }
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: behind.id });
    assert!(!fixture.inbox.is_consumed(failing.id).await.map_err(fail)?, "a given-up effect is not recorded");
    let dead = read_topic(&fixture.bootstrap, &dead_letter_topic, 1, WAIT).await.map_err(fail)?;
    assert_eq!(dead.len(), 1, "the given-up record is on the dead-letter topic");
    fixture.stop().await?;
    assert_eq!(effect.calls(), 3, "two failed runs, then the record behind");
    assert_eq!(fixture.committed()?, Some(2));
    Ok(())
}

/// A record without `oncebox_event_id`, one with a malformed id, and one whose payload does not
/// fit the handler's type, then a good one.
async fn produce_poison_then_good(
    fixture: &Fixture,
    sender: &KafkaSender,
) -> Result<OutboundMessage, Failed> {
    let raw = raw_producer(&fixture.bootstrap).map_err(fail)?;
    let type_header: (&str, &[u8]) = (HEADER_EVENT_TYPE, EVENT_TYPE.as_bytes());
    produce_raw(&raw, &fixture.topic, &[type_header], b"{\"index\":4}").await.map_err(fail)?;
    produce_raw(&raw, &fixture.topic, &[(HEADER_EVENT_ID, b"not-a-uuid"), type_header], b"{\"index\":5}")
        .await
        .map_err(fail)?;
    let undecodable = Uuid::now_v7().to_string();
    produce_raw(
        &raw,
        &fixture.topic,
        &[(HEADER_EVENT_ID, undecodable.as_bytes()), type_header, (HEADER_PAYLOAD_TYPE, b"OrderCreated")],
        b"{\"index\":\"six\"}",
    )
    .await
    .map_err(fail)?;
    let good = fixture.message(7);
    fixture.send(sender, &good).await?;
    Ok(good)
}

async fn poison_records_go_to_the_dead_letter_topic(harness: Arc<Harness>) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), true).await?;
    let sender = fixture.sender()?;
    let good = produce_poison_then_good(&fixture, &sender).await?;
    let dead_letter_topic = fixture.dead_letter_topic.clone().ok_or_else(|| fail("no dead-letter topic"))?;
    let mut reasons = Vec::new();
    for _ in 0..3 {
        match fixture.next_outcome().await? {
            KafkaOutcome::DeadLettered { to, reason, .. } if to == dead_letter_topic => reasons.push(reason),
            other => return Err(fail(format!("a poison record was not dead-lettered: {other:?}"))),
        }
    }
    assert!(reasons[0].contains(HEADER_EVENT_ID), "{}", reasons[0]);
    assert!(reasons[1].contains("not-a-uuid"), "{}", reasons[1]);
    assert!(reasons[2].contains("does not decode"), "{}", reasons[2]);
    // The partition goes on after its poison records.
    assert_eq!(fixture.next_outcome().await?, KafkaOutcome::Applied { id: good.id });
    assert_eq!(effect.calls(), 1, "no effect ran for a poison record");

    let dead = read_topic(&fixture.bootstrap, &dead_letter_topic, 3, WAIT).await.map_err(fail)?;
    assert_eq!(dead.len(), 3, "gave up waiting: {} of 3 dead letters could be read back", dead.len());
    let sources: Vec<Option<String>> =
        dead.iter().map(|record| support::header(record, HEADER_DEAD_LETTER_SOURCE)).collect();
    let expected: Vec<Option<String>> =
        (0..3).map(|offset| Some(format!("{}/0/{offset}", fixture.topic))).collect();
    assert_eq!(sources, expected);
    let payloads: Vec<&[u8]> = dead.iter().filter_map(rdkafka::Message::payload).collect();
    assert_eq!(payloads, [&b"{\"index\":4}"[..], b"{\"index\":5}", b"{\"index\":\"six\"}"]);
    for record in &dead {
        let reason = support::header(record, HEADER_DEAD_LETTER_REASON).unwrap_or_default();
        assert!(reason.contains("decode error"), "{reason}");
    }
    fixture.stop().await?;
    assert_eq!(fixture.committed()?, Some(4));
    Ok(())
}

async fn a_poison_record_without_a_dead_letter_topic_stops_its_partition(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let good = produce_poison_then_good(&fixture, &sender).await?;
    match fixture.next_outcome().await? {
        KafkaOutcome::Held { id: None, at, reason } if at == format!("{}/0@0", fixture.topic) => {
            assert!(reason.contains(HEADER_EVENT_ID), "{reason}");
        }
        other => return Err(fail(format!("the partition did not stop at the poison record: {other:?}"))),
    }
    fixture.stop().await?;
    let after: Vec<KafkaOutcome> = fixture.remaining_outcomes();
    assert!(after.is_empty(), "records behind a poison record were handled: {after:?}");
    assert_eq!(effect.calls(), 0);
    assert!(!fixture.inbox.is_consumed(good.id).await.map_err(fail)?);
    assert_eq!(fixture.committed()?, None, "the poison record was committed without a dead-letter topic");
    Ok(())
}

/// Produces an `order-created` record with a fresh id to `partition`; returns the id.
async fn produce_order(
    fixture: &Fixture,
    producer: &FutureProducer,
    partition: i32,
    index: u32,
) -> Result<Uuid, Failed> {
    let id = Uuid::now_v7();
    let id_text = id.to_string();
    let headers: [(&str, &[u8]); 3] = [
        (HEADER_EVENT_ID, id_text.as_bytes()),
        (HEADER_EVENT_TYPE, EVENT_TYPE.as_bytes()),
        (HEADER_PAYLOAD_TYPE, b"OrderCreated"),
    ];
    let payload = format!("{{\"index\":{index}}}");
    produce_raw_to(producer, &fixture.topic, Some(partition), &headers, payload.as_bytes())
        .await
        .map_err(fail)?;
    Ok(id)
}

/// Records produced to a two-partition topic, counted per partition, with the partition of each.
struct Produced {
    producer: FutureProducer,
    per_partition: [i64; 2],
    partition_of: std::collections::HashMap<Uuid, i32>,
    next_index: u32,
}

impl Produced {
    fn new(fixture: &Fixture) -> Result<Self, Failed> {
        let producer = raw_producer(&fixture.bootstrap).map_err(fail)?;
        Ok(Self { producer, per_partition: [0; 2], partition_of: Default::default(), next_index: 0 })
    }

    async fn order(&mut self, fixture: &Fixture, partition: i32) -> TestResult {
        let id = produce_order(fixture, &self.producer, partition, self.next_index).await?;
        self.partition_of.insert(id, partition);
        self.per_partition[partition as usize] += 1;
        self.next_index += 1;
        Ok(())
    }

    fn on(&self, partition: i32) -> i64 {
        self.per_partition[partition as usize]
    }
}

/// Starts a listener on a two-partition topic, has it handle and commit `warm_up` records, then
/// starts a second member of its group and produces to both partitions until the second member
/// handles one: the partition the group moved to it is returned with the second member.
async fn split_a_group_of_two(
    harness: &Harness,
    warm_up: u32,
) -> Result<(Fixture, Running, Produced, i32), Failed> {
    let mut fixture = Fixture::start_with_partitions(harness, Arc::new(Effect::default()), false, 2).await?;
    let mut produced = Produced::new(&fixture)?;
    for index in 0..warm_up {
        produced.order(&fixture, (index % 2) as i32).await?;
    }
    for _ in 0..warm_up {
        fixture.next_outcome().await?;
    }
    let first_commits = [produced.on(0), produced.on(1)];
    eventually("the first member committed both partitions", WAIT, || async {
        Ok(committed_at(&fixture, 0)? == Some(first_commits[0])
            && committed_at(&fixture, 1)? == Some(first_commits[1]))
    })
    .await?;

    let mut second = fixture.spawn(Arc::new(Effect::default())).map_err(fail)?;
    let deadline = std::time::Instant::now() + 2 * WAIT;
    loop {
        if std::time::Instant::now() > deadline {
            second.stop().await?;
            return Err(fail(format!(
                "gave up waiting: the second member handled nothing within {:?}",
                2 * WAIT
            )));
        }
        for partition in 0..2 {
            produced.order(&fixture, partition).await?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let applied =
            std::iter::from_fn(|| second.outcomes.try_recv().ok()).find_map(|outcome| match outcome {
                KafkaOutcome::Applied { id } => produced.partition_of.get(&id).copied(),
                _ => None,
            });
        if let Some(moved) = applied {
            return Ok((fixture, second, produced, moved));
        }
    }
}

/// The group's committed offset of one partition of the fixture's topic.
fn committed_at(fixture: &Fixture, partition: i32) -> Result<Option<i64>, Failed> {
    committed_offset_at(&fixture.bootstrap, &fixture.group, &fixture.topic, partition).map_err(fail)
}

/// A partition that moved to another member in a rebalance now belongs to that member: when the
/// first member stops, its final synchronous commit must not write its older offset over the one
/// the new owner committed, or the group would consume those records again.
async fn a_listener_that_lost_a_partition_does_not_commit_over_its_new_owner(
    harness: Arc<Harness>,
) -> TestResult {
    let (mut fixture, second, mut produced, moved) = split_a_group_of_two(&harness, 6).await?;
    for _ in 0..5 {
        produced.order(&fixture, moved).await?;
    }
    let owner_position = produced.on(moved);
    eventually("the new owner committed every record of the moved partition", WAIT, || async {
        Ok(committed_at(&fixture, moved)? == Some(owner_position))
    })
    .await?;

    fixture.stop().await?;
    let after_first_stopped = committed_at(&fixture, moved)?;
    second.stop().await?;
    assert_eq!(
        after_first_stopped,
        Some(owner_position),
        "the member that lost partition {moved} committed an older offset over its new owner's"
    );
    Ok(())
}

/// A partition that moved to another member and came back: the offsets the first member
/// committed before it lost the partition are stale, because the other member went on from there.
/// When the first member stops before it handled anything new there, its final synchronous commit
/// must leave the group's offset at the other member's position.
async fn a_partition_that_came_back_keeps_the_offset_its_other_owner_committed(
    harness: Arc<Harness>,
) -> TestResult {
    let (mut fixture, second, mut produced, moved) = split_a_group_of_two(&harness, 4).await?;
    for _ in 0..3 {
        produced.order(&fixture, moved).await?;
    }
    let owner_position = produced.on(moved);
    eventually("the second member committed every record of its partition", WAIT, || async {
        Ok(committed_at(&fixture, moved)? == Some(owner_position))
    })
    .await?;

    // The second member leaves; the partition goes back to the first. A poison record there (no
    // dead-letter topic) shows the first member owns it again without committing anything new.
    second.stop().await?;
    produce_raw_to(
        &produced.producer,
        &fixture.topic,
        Some(moved),
        &[(HEADER_EVENT_TYPE, b"order-created")],
        b"{}",
    )
    .await
    .map_err(fail)?;
    loop {
        match fixture.next_outcome().await? {
            KafkaOutcome::Held { at, .. } if at.starts_with(&format!("{}/{moved}@", fixture.topic)) => {
                let resumed = format!("{}/{moved}@{owner_position}", fixture.topic);
                assert_eq!(at, resumed, "the first member resumed at the other owner's offset");
                break;
            }
            KafkaOutcome::Applied { .. } | KafkaOutcome::Duplicate { .. } => {}
            other => return Err(fail(format!("unexpected outcome: {other:?}"))),
        }
    }

    fixture.stop().await?;
    assert_eq!(
        committed_at(&fixture, moved)?,
        Some(owner_position),
        "the first member's final commit rewound partition {moved} to the offset it held before losing it"
    );
    Ok(())
}

/// The listener's bound on records kept in memory behind a record that waits for its retry
/// (`MAX_QUEUED_BEHIND` in `src/listener.rs`): at this many its partition is paused. A test that
/// relies on the pause waits for the listener to log it, so a larger bound fails it loudly.
const QUEUED_BEHIND_BEFORE_A_PAUSE: u32 = 10_000;

/// Which of two members of a group reported something.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Member {
    First,
    Second,
}

/// `failed`, with what the members logged about `topic` (their assignments, pauses and resumes).
fn with_log(failed: Failed, topic: &str) -> Failed {
    fail(format!(
        "{}\nwhat the listeners logged about {topic}:\n{}",
        failed.message().unwrap_or_default(),
        log_lines::matching(&[topic]).join("\n")
    ))
}

/// Whether a member logged that it resumed a partition of `topic` it had paused when the partition
/// was assigned to it again.
fn logged_a_resume_on_assignment(topic: &str) -> bool {
    !log_lines::matching(&["assigned to it again", topic]).is_empty()
}

/// Waits until one of two members reports an outcome `wanted` accepts, skipping the others (and
/// outcomes a receiver fell behind on); gives up after `within`.
async fn either_reports(
    first: &mut broadcast::Receiver<KafkaOutcome>,
    second: &mut broadcast::Receiver<KafkaOutcome>,
    what: &str,
    within: Duration,
    wanted: impl Fn(&KafkaOutcome) -> bool,
) -> Result<Member, Failed> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let next = tokio::time::timeout_at(deadline, async {
            tokio::select! {
                received = first.recv() => (Member::First, received),
                received = second.recv() => (Member::Second, received),
            }
        })
        .await;
        match next {
            Err(_) => return Err(fail(format!("gave up waiting after {within:?}: {what}"))),
            Ok((member, Ok(outcome))) if wanted(&outcome) => return Ok(member),
            Ok((_, Ok(_) | Err(RecvError::Lagged(_)))) => {}
            Ok((member, Err(RecvError::Closed))) => {
                return Err(fail(format!(
                    "the {member:?} member's outcome stream closed while waiting: {what}"
                )));
            }
        }
    }
}

/// A poison record without a dead-letter topic pauses its partition. When another member joins
/// and leaves, the partition is revoked and comes back; librdkafka keeps an application's pause
/// across that, so unless the listener resumes it the partition is never fetched again, silently.
/// Fetched again, it stops at the same poison record, which the listener reports once more.
async fn a_partition_held_at_a_poison_record_is_fetched_again_when_it_comes_back(
    harness: Arc<Harness>,
) -> TestResult {
    let effect = Arc::new(Effect::default());
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let raw = raw_producer(&fixture.bootstrap).map_err(fail)?;
    // No `oncebox_event_id`: poison.
    produce_raw(&raw, &fixture.topic, &[(HEADER_EVENT_TYPE, EVENT_TYPE.as_bytes())], b"{\"index\":1}")
        .await
        .map_err(fail)?;
    let held_at = format!("{}/0@0", fixture.topic);
    let is_held_there =
        |outcome: &KafkaOutcome| matches!(outcome, KafkaOutcome::Held { at, .. } if *at == held_at);
    let outcome = fixture.next_outcome().await?;
    if !is_held_there(&outcome) {
        return Err(fail(format!("the partition did not stop at the poison record: {outcome:?}")));
    }

    // A second member joins: the group rebalances, and whichever member owns the partition
    // afterwards fetches it from the group's committed offset (none: the poison record) again.
    let mut second = fixture.spawn(Arc::new(Effect::default())).map_err(fail)?;
    let owner = either_reports(
        &mut fixture.outcomes,
        &mut second.outcomes,
        "after the second member joined, no member fetched the held partition again (it stayed paused)",
        2 * WAIT,
        is_held_there,
    )
    .await;
    let owner = match owner {
        Ok(owner) => owner,
        Err(failed) => {
            second.stop().await?;
            return Err(with_log(failed, &fixture.topic));
        }
    };
    // The second member leaves; the partition comes back to the first (again, if it had it).
    let _ = fixture.remaining_outcomes();
    second.stop().await?;
    let outcome = fixture.next_outcome().await.map_err(|_| {
        let failed = fail(format!(
            "the partition came back to the first member (the {owner:?} member had it while both \
             were in the group) and was never fetched again: no outcome within {WAIT:?}"
        ));
        with_log(failed, &fixture.topic)
    })?;
    if !is_held_there(&outcome) {
        return Err(fail(format!("the first member did not stop at the poison record again: {outcome:?}")));
    }
    fixture.stop().await?;
    assert!(logged_a_resume_on_assignment(&fixture.topic), "the resume was not logged");
    assert_eq!(effect.calls(), 0, "no effect ran for the poison record");
    assert_eq!(fixture.committed()?, None, "the poison record was committed without a dead-letter topic");
    Ok(())
}

/// A handler that keeps failing holds its record; once `QUEUED_BEHIND_BEFORE_A_PAUSE` records wait
/// behind it the partition is paused. A second member joins and leaves meanwhile, so the partition
/// is revoked and comes back; the records kept in memory are dropped with the hold, and must be
/// fetched again from the committed offset. The handler then succeeds (after at least 20 failed
/// runs): every record is handled once, in order.
async fn records_behind_a_failing_record_are_handled_once_in_order_across_a_rebalance(
    harness: Arc<Harness>,
) -> TestResult {
    // Shut until the rebalance is over, so the partition is held and paused across it.
    let effect = Effect::shut(20);
    let mut fixture = Fixture::start(&harness, effect.clone(), false).await?;
    let sender = fixture.sender()?;
    let batch: Vec<OutboundMessage> =
        (0..QUEUED_BEHIND_BEFORE_A_PAUSE + 20).map(|index| fixture.message(index)).collect();
    // The first record and those that fill the queue behind it, then the rest in a send of their
    // own: a paused partition resumes right after the last record handed out, and tansu 0.6
    // answers no fetch that starts inside a record batch.
    let (filling, rest) = batch.split_at(QUEUED_BEHIND_BEFORE_A_PAUSE as usize + 1);
    for part in [filling, rest] {
        let results = sender.send(part, Deadline::after(4 * WAIT)).await;
        if let Some(error) = results.iter().find_map(|result| result.as_ref().err()) {
            return Err(fail(format!("could not send the batch: {error}")));
        }
    }
    let topic_field = format!("topic={}", fixture.topic);
    eventually(
        "the listener logged that it paused the partition behind the failing record",
        2 * WAIT,
        || async { Ok(!log_lines::matching(&["Kafka partition paused", &topic_field]).is_empty()) },
    )
    .await?;

    let first = batch[0].id;
    // The first member's runs of the held record so far (the hold exists before anything queues
    // behind it): a run at attempt 1 from now on is a fresh one.
    let _ = fixture.remaining_outcomes();
    let mut second = fixture.spawn(effect.clone()).map_err(fail)?;
    // Whichever member owns the partition after the rebalance runs the first record afresh.
    let joined = either_reports(
        &mut fixture.outcomes,
        &mut second.outcomes,
        "after the second member joined, no member ran the first record afresh (the partition stayed paused)",
        2 * WAIT,
        |outcome| matches!(outcome, KafkaOutcome::Retrying { id, attempts: 1, .. } if *id == first),
    )
    .await;
    if let Err(failed) = joined {
        second.stop().await?;
        return Err(with_log(failed, &fixture.topic));
    }
    second.stop().await?;
    effect.open();

    let expected: Vec<Uuid> = batch.iter().map(|message| message.id).collect();
    let handled = || -> Result<Vec<Uuid>, Failed> {
        Ok(effect.received.lock().map_err(fail)?.iter().map(|event| event.id).collect())
    };
    let waited =
        eventually("every record was handled", 4 * WAIT, || async { Ok(handled()?.len() >= expected.len()) })
            .await;
    if let Err(failed) = waited {
        let count = handled()?.len();
        let failed =
            fail(format!("{}: {count} of {} handled", failed.message().unwrap_or_default(), expected.len()));
        return Err(with_log(failed, &fixture.topic));
    }
    fixture.stop().await?;
    let handled = handled()?;
    assert_eq!(handled.len(), expected.len(), "a record was handled more than once");
    assert!(handled == expected, "the records were not handled in their partition's order");
    assert!(effect.calls() >= expected.len() + 20, "the handler failed at least 20 times first");
    assert!(logged_a_resume_on_assignment(&fixture.topic), "the resume was not logged");
    assert_eq!(fixture.committed()?, Some(i64::from(QUEUED_BEHIND_BEFORE_A_PAUSE + 20)));
    Ok(())
}

fn cases() -> Vec<Case<Harness>> {
    vec![
        case!("a_typed_handler_receives_the_decoded_event", a_typed_handler_receives_the_decoded_event),
        case!("a_duplicate_record_has_its_effect_once", a_duplicate_record_has_its_effect_once),
        case!(
            "a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing",
            a_transactional_handler_commits_its_effect_with_the_id_once_and_a_failed_run_leaves_nothing
        ),
        case!(
            "a_failing_handler_is_retried_in_order_and_committed_after_success",
            a_failing_handler_is_retried_in_order_and_committed_after_success
        ),
        case!(
            "a_record_whose_handler_keeps_failing_is_not_committed_and_comes_again",
            a_record_whose_handler_keeps_failing_is_not_committed_and_comes_again
        ),
        case!(
            "a_record_that_fails_max_attempts_times_is_dead_lettered_and_the_partition_goes_on",
            a_record_that_fails_max_attempts_times_is_dead_lettered_and_the_partition_goes_on
        ),
        case!("poison_records_go_to_the_dead_letter_topic", poison_records_go_to_the_dead_letter_topic),
        case!(
            "a_poison_record_without_a_dead_letter_topic_stops_its_partition",
            a_poison_record_without_a_dead_letter_topic_stops_its_partition
        ),
        case!(
            "a_listener_that_lost_a_partition_does_not_commit_over_its_new_owner",
            a_listener_that_lost_a_partition_does_not_commit_over_its_new_owner
        ),
        case!(
            "a_partition_that_came_back_keeps_the_offset_its_other_owner_committed",
            a_partition_that_came_back_keeps_the_offset_its_other_owner_committed
        ),
        case!(
            "a_partition_held_at_a_poison_record_is_fetched_again_when_it_comes_back",
            a_partition_held_at_a_poison_record_is_fetched_again_when_it_comes_back
        ),
        case!(
            "records_behind_a_failing_record_are_handled_once_in_order_across_a_rebalance",
            records_behind_a_failing_record_are_handled_once_in_order_across_a_rebalance
        ),
    ]
}

fn main() -> ExitCode {
    let bootstrap = match support::broker_or_exit("kafka listener") {
        Ok(bootstrap) => bootstrap,
        Err(code) => return code,
    };
    log_lines::install();
    Suite::new().add("listener", Arc::new(Harness { bootstrap }), cases()).run()
}
