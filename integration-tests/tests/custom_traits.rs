//! A serializer and an id generator of the user's own, end to end on the real servers: PostgreSQL
//! holds the outbox and the inbox, Kafka and RabbitMQ carry the events.
//!
//! The publisher writes orders in a versioned text envelope that is not JSON
//! (`v2;order=7;total=1250`, payload type [`PAYLOAD_TYPE`]) with ids from a deterministic
//! generator (a per-run namespace plus a counter, as UUIDv8); the broker's own listener decodes
//! them with the matching [`Deserializer`] through `on_once_with`. The accounting at the end:
//!
//! * the generator handed out exactly the ids the publisher returned, in order, and they are the
//!   namespace's first ids;
//! * the set of ids the consumer received is exactly the set of committed ones (rolled-back ids
//!   were generated but never delivered), each effect ran once with the very order published, and
//!   the received `payload_type` is the custom one;
//! * every stored row holds the envelope text and the custom payload type;
//! * copies of delivered events re-driven straight to the broker are answered by the inbox
//!   (`Outcome::Duplicate`) without running the effect again, and so is a direct inbox call with a
//!   delivered id;
//! * a JSON payload sent to the same consumer is poison: the custom deserializer refuses it, the
//!   effect never sees it, and the listener reports it naming the event and the target type.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncebox::consume::{Outcome, Received};
use oncebox::kafka::{KafkaListener, KafkaListenerConfig};
use oncebox::postgres::PgDialect;
use oncebox::rabbit::{RabbitListener, RabbitListenerConfig, RabbitTopology};
use oncebox::{
    Consumed, Deserializer, Error, ErrorKind, EventMeta, Headers, Inbox, Oncebox, OutboundMessage,
    SerializedEvent, Serializer, UuidGenerator,
};
use oncebox_integration_tests::{
    EVENT_TYPE, KafkaTransport, Names, Order, PgStore, RabbitTransport, Store, Transport,
};
use oncebox_testkit::background::{Background, Shutdown};
use oncebox_testkit::eventually;
use oncebox_testkit::runner::{Failed, TestResult, fail, test_server_missing};
use sqlx::AssertSqlSafe;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// The payload type the envelope is published under (`oncebox_payload_type`).
const PAYLOAD_TYPE: &str = "acme.orders.OrderPlaced/v2";
/// The inbox consumer of a run.
const CONSUMER: &str = "custom_effects";
/// Business transactions per run: every fourth rolls back, every third of the others publishes
/// three events with `publish_all`.
const TRANSACTIONS: i64 = 12;
/// Delivered events re-driven straight to the broker.
const COPIES: usize = 3;
/// The bound on waiting for deliveries.
const WAIT: Duration = Duration::from_secs(90);
/// Shutdown deadline of the relay.
const SHUTDOWN: Duration = Duration::from_secs(10);

/// The user's format: `v2;order=<i64>;total=<i64>`, nothing else, under [`PAYLOAD_TYPE`].
#[derive(Debug, Clone, Copy, Default)]
struct EnvelopeV2;

fn refused(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Serialization, format!("not a v2 order envelope: {why}"))
}

impl Serializer<Order> for EnvelopeV2 {
    fn serialize(&self, order: &Order) -> oncebox::Result<SerializedEvent> {
        Ok(SerializedEvent {
            payload: format!("v2;order={};total={}", order.order, order.total_cents),
            payload_type: PAYLOAD_TYPE.to_owned(),
        })
    }
}

impl Deserializer<Order> for EnvelopeV2 {
    fn deserialize(&self, payload: &[u8], payload_type: Option<&str>) -> oncebox::Result<Order> {
        if payload_type != Some(PAYLOAD_TYPE) {
            return Err(refused(format!("payload type {payload_type:?}")));
        }
        let text = std::str::from_utf8(payload).map_err(refused)?;
        let mut fields = text.split(';');
        if fields.next() != Some("v2") {
            return Err(refused(format!("{text:?} is not version 2")));
        }
        let mut field = |name: &str| -> oncebox::Result<i64> {
            let value = fields
                .next()
                .and_then(|field| field.strip_prefix(name))
                .and_then(|field| field.strip_prefix('='))
                .ok_or_else(|| refused(format!("{text:?} has no {name}")))?;
            value.parse().map_err(|_| refused(format!("{name} of {text:?} is not a number")))
        };
        let order = Order { order: field("order")?, total_cents: field("total")? };
        match fields.next() {
            None => Ok(order),
            Some(extra) => Err(refused(format!("{text:?} has an unknown field {extra:?}"))),
        }
    }
}

/// Deterministic ids: the run's namespace in the high 64 bits, a counter from 1 in the low ones,
/// made a UUIDv8 (RFC 9562 custom layout). It keeps every id it handed out.
#[derive(Debug, Clone)]
struct CountingIds {
    namespace: u64,
    next: Arc<AtomicU64>,
    issued: Arc<Mutex<Vec<Uuid>>>,
}

impl CountingIds {
    fn new() -> Self {
        Self {
            namespace: fastrand::u64(..),
            next: Arc::new(AtomicU64::new(1)),
            issued: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The `n`th id of the namespace (from 1).
    fn nth(&self, n: u64) -> Uuid {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.namespace.to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        uuid::Builder::from_custom_bytes(bytes).into_uuid()
    }

    fn issued(&self) -> Vec<Uuid> {
        self.issued.lock().map(|issued| issued.clone()).unwrap_or_default()
    }
}

impl UuidGenerator for CountingIds {
    fn generate(&self) -> Uuid {
        let id = self.nth(self.next.fetch_add(1, Ordering::SeqCst));
        if let Ok(mut issued) = self.issued.lock() {
            issued.push(id);
        }
        id
    }
}

/// What the consumer's effect saw, one entry per run of the effect.
#[derive(Default)]
struct Effects {
    runs: Mutex<Vec<(Uuid, Order, Option<String>)>>,
}

impl Effects {
    fn snapshot(&self) -> Vec<(Uuid, Order, Option<String>)> {
        self.runs.lock().map(|runs| runs.clone()).unwrap_or_default()
    }

    fn runs_of(&self, id: Uuid) -> usize {
        self.snapshot().iter().filter(|(seen, _, _)| *seen == id).count()
    }
}

/// The effect `on_once_with` runs: it notes the decoded event.
fn note_effect<M: Send + 'static>(
    effects: Arc<Effects>,
) -> impl Fn(Received<Order, M>) -> std::future::Ready<oncebox::Result<()>> + Send + Sync + 'static {
    move |event| {
        if let Ok(mut runs) = effects.runs.lock() {
            runs.push((event.id, event.payload, event.payload_type));
        }
        std::future::ready(Ok(()))
    }
}

type PgInbox = Inbox<Arc<<PgDialect as oncebox::Dialect>::Writer>>;
type Outbox = Oncebox<PgDialect, EnvelopeV2>;

/// A listener on its own task, its outcomes collected.
struct Running {
    running: Background<oncebox::Result<()>>,
    collector: JoinHandle<()>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

impl Running {
    fn spawn<F>(mut receiver: broadcast::Receiver<Outcome>, run: impl FnOnce(Shutdown) -> F) -> Self
    where
        F: Future<Output = oncebox::Result<()>> + Send + 'static,
    {
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let collector = {
            let outcomes = outcomes.clone();
            tokio::spawn(async move {
                loop {
                    match receiver.recv().await {
                        Ok(outcome) => {
                            if let Ok(mut outcomes) = outcomes.lock() {
                                outcomes.push(outcome);
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
            })
        };
        Self { running: Background::spawn(run), collector, outcomes }
    }

    fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes.lock().map(|outcomes| outcomes.clone()).unwrap_or_default()
    }

    async fn stop(self) -> Result<(), Failed> {
        let ran = self.running.stop().await?;
        self.collector.abort();
        ran.map_err(fail)
    }
}

/// A broker whose own listener consumes the envelope through `on_once_with`.
trait EnvelopeBroker: Transport {
    /// Starts the listener of `names.consumer`.
    fn listen_envelope(names: &Names, inbox: PgInbox, effects: Arc<Effects>) -> Result<Running, Failed>;
}

fn server(variable: &str) -> Result<String, Failed> {
    std::env::var(variable).map_err(|_| fail(format!("{variable} is not set")))
}

impl EnvelopeBroker for KafkaTransport {
    fn listen_envelope(names: &Names, inbox: PgInbox, effects: Arc<Effects>) -> Result<Running, Failed> {
        let config =
            KafkaListenerConfig::new(server(Self::VARIABLE)?, &names.consumer, [names.destination.as_str()])
                .with_retry_backoff(Duration::from_millis(20), Duration::from_millis(200));
        let listener = KafkaListener::builder(config)
            .on_once_with(EVENT_TYPE, inbox, EnvelopeV2, note_effect(effects))
            .build()
            .map_err(fail)?;
        Ok(Running::spawn(listener.outcomes(), |shutdown| async move { listener.run(shutdown).await }))
    }
}

impl EnvelopeBroker for RabbitTransport {
    fn listen_envelope(names: &Names, inbox: PgInbox, effects: Arc<Effects>) -> Result<Running, Failed> {
        let config = RabbitListenerConfig::new(server(Self::VARIABLE)?, &names.consumer)
            .with_declare(RabbitTopology::new(&names.destination))
            .with_retry_backoff(Duration::from_millis(20), Duration::from_millis(200));
        let listener = RabbitListener::builder(config)
            .on_once_with(EVENT_TYPE, inbox, EnvelopeV2, note_effect(effects))
            .build()
            .map_err(fail)?;
        Ok(Running::spawn(listener.outcomes(), |shutdown| async move { listener.run(shutdown).await }))
    }
}

/// One broker: sets up, runs the scenario, then stops and removes everything also when it failed.
async fn round_trip<T: EnvelopeBroker>() -> TestResult {
    let test = format!("custom_traits::postgres_{}", T::NAME);
    let names = Names::fresh(&format!("custom_{}", T::NAME));
    let Some(store) = PgStore::from_env(&names) else {
        return test_server_missing(&test, PgStore::VARIABLE.unwrap_or_default());
    };
    let Some(transport) = T::from_env() else {
        return test_server_missing(&test, T::VARIABLE);
    };
    transport.prepare(&names).await.map_err(fail)?;
    let ids = CountingIds::new();
    let started = Oncebox::builder(names.config("10s", &[]).map_err(fail)?)
        .dialect(store.open().await.map_err(fail)?)
        .sender_arc(transport.sender().map_err(fail)?)
        .serializer(EnvelopeV2)
        .uuid_generator(ids.clone())
        .start()
        .await;
    let outbox = match started {
        Ok(outbox) => outbox,
        Err(error) => {
            let _ = transport.dispose(&names).await;
            return Err(fail(error));
        }
    };
    let mut listening = None;
    let result = scenario::<T>(&test, &transport, &outbox, &names, &ids, &mut listening).await;

    let mut teardown = Vec::new();
    if let Some(listening) = listening {
        teardown.push(listening.stop().await);
    }
    teardown.push(outbox.shutdown(SHUTDOWN).await.map_err(fail));
    teardown.push(store.dispose(outbox.dialect(), &names).await.map_err(fail));
    teardown.push(transport.dispose(&names).await.map_err(fail));
    result?;
    teardown.into_iter().collect()
}

async fn scenario<T: EnvelopeBroker>(
    test: &str,
    transport: &T,
    outbox: &Outbox,
    names: &Names,
    ids: &CountingIds,
    listening: &mut Option<Running>,
) -> TestResult {
    store_tables(outbox, names).await?;
    let effects = Arc::new(Effects::default());
    let running = listening.insert(T::listen_envelope(names, outbox.inbox(CONSUMER), effects.clone())?);
    transport.await_listener(names).await.map_err(fail)?;

    // Publish through the custom serializer and id generator, in business transactions.
    let mut published: Vec<Uuid> = Vec::new();
    let mut committed: BTreeMap<Uuid, Order> = BTreeMap::new();
    let mut rolled_back: BTreeSet<Uuid> = BTreeSet::new();
    for transaction in 0..TRANSACTIONS {
        let size = if transaction % 3 == 1 { 3 } else { 1 };
        let orders: Vec<Order> = (0..size)
            .map(|n| {
                let order = transaction * 10 + n;
                Order { order, total_cents: 1_000 + order * 7 }
            })
            .collect();
        let commit = transaction % 4 != 3;
        let placed = place(outbox, names, &orders, transaction, commit).await.map_err(fail)?;
        assert_eq!(placed.len(), orders.len(), "{test}: one id per order");
        published.extend(&placed);
        if commit {
            committed.extend(placed.into_iter().zip(orders));
        } else {
            rolled_back.extend(placed);
        }
    }

    // The generator made exactly the ids the publisher handed out, in order: the namespace's first.
    let issued = ids.issued();
    assert_eq!(issued, published, "{test}: the publisher's ids are the generator's, in order");
    let expected: Vec<Uuid> = (1..=published.len() as u64).map(|n| ids.nth(n)).collect();
    assert_eq!(issued, expected, "{test}: the ids are the deterministic ones");
    assert!(issued.iter().all(|id| id.get_version() == Some(uuid::Version::Custom)), "{test}: UUIDv8 ids");

    // Every stored row holds the envelope, not JSON, under the custom payload type.
    for (id, order) in &committed {
        let row = outbox.outbox_dao().get(*id).await.map_err(fail)?;
        let row = row.ok_or_else(|| fail(format!("{test}: no outbox row for committed event {id}")))?;
        assert_eq!(
            row.payload,
            format!("v2;order={};total={}", order.order, order.total_cents),
            "{test}: {id}"
        );
        assert_eq!(row.payload_type, PAYLOAD_TYPE, "{test}: {id}");
        assert!(serde_json::from_str::<serde_json::Value>(&row.payload).is_err(), "{test}: {id} is not JSON");
    }
    for id in &rolled_back {
        assert!(
            outbox.outbox_dao().get(*id).await.map_err(fail)?.is_none(),
            "{test}: rolled back {id} stored"
        );
    }

    eventually("every committed event consumed", WAIT, || async {
        let seen: BTreeSet<Uuid> = effects.snapshot().iter().map(|(id, _, _)| *id).collect();
        Ok(committed.keys().all(|id| seen.contains(id)))
    })
    .await
    .map_err(|error| {
        fail(format!("{test}: {}; outcomes {:?}", error.message().unwrap_or_default(), running.outcomes()))
    })?;
    eventually("every outbox row PROCESSED", WAIT, || async {
        let statuses = PgStore::outbox_statuses(outbox.dialect(), names).await.map_err(fail)?;
        Ok(statuses == [("PROCESSED".to_owned(), committed.len() as i64)])
    })
    .await?;

    // Accounting: received == generated minus rolled back, each effect once with the published order.
    let runs = effects.snapshot();
    let received: BTreeSet<Uuid> = runs.iter().map(|(id, _, _)| *id).collect();
    let committed_ids: BTreeSet<Uuid> = committed.keys().copied().collect();
    let generated_not_rolled_back: BTreeSet<Uuid> =
        issued.iter().copied().filter(|id| !rolled_back.contains(id)).collect();
    assert_eq!(received, committed_ids, "{test}: the ids received are exactly the committed ones");
    assert_eq!(received, generated_not_rolled_back, "{test}: the ids received are the generated ones");
    assert!(received.is_disjoint(&rolled_back), "{test}: a rolled-back event was delivered");
    assert_eq!(runs.len(), committed.len(), "{test}: an effect ran twice: {runs:?}");
    for (id, order, payload_type) in &runs {
        assert_eq!(committed.get(id), Some(order), "{test}: {id} did not round-trip");
        assert_eq!(payload_type.as_deref(), Some(PAYLOAD_TYPE), "{test}: {id}'s payload type");
    }
    // A listener reports an outcome after it settled the message, a moment after the effect.
    let applied = || -> BTreeSet<Uuid> {
        running
            .outcomes()
            .iter()
            .filter_map(|outcome| match outcome {
                Outcome::Applied { id } => Some(*id),
                _ => None,
            })
            .collect()
    };
    eventually("every committed event reported applied", WAIT, || async { Ok(applied() == committed_ids) })
        .await
        .map_err(|error| {
            fail(format!("{test}: {}; applied {:?}", error.message().unwrap_or_default(), applied()))
        })?;
    assert_eq!(applied(), committed_ids, "{test}: the listener reported each committed event applied");

    // Re-drive copies of delivered events: the inbox answers them, the effect does not run again.
    let copies: Vec<OutboundMessage> =
        committed.iter().take(COPIES).map(|(id, order)| copy(names, *id, order)).collect::<Result<_, _>>()?;
    transport.republish(&copies).await.map_err(fail)?;
    eventually("every copy answered as a duplicate", WAIT, || async {
        let duplicates: Vec<Uuid> = running
            .outcomes()
            .iter()
            .filter_map(|outcome| match outcome {
                Outcome::Duplicate { id } => Some(*id),
                _ => None,
            })
            .collect();
        Ok(copies.iter().all(|copy| duplicates.contains(&copy.id)))
    })
    .await
    .map_err(|error| {
        fail(format!("{test}: {}; outcomes {:?}", error.message().unwrap_or_default(), running.outcomes()))
    })?;
    for copy in &copies {
        assert_eq!(effects.runs_of(copy.id), 1, "{test}: the copy of {} ran the effect again", copy.id);
    }

    // The inbox itself, called with a delivered id: a duplicate, the effect not run.
    let (delivered, _) = committed.iter().next().ok_or_else(|| fail("nothing committed"))?;
    let mut ran = false;
    let again = outbox
        .inbox(CONSUMER)
        .consume_once(*delivered, async || {
            ran = true;
            Ok::<(), Error>(())
        })
        .await
        .map_err(|error| fail(format!("{test}: {error:?}")))?;
    assert!(matches!(again, Consumed::Duplicate) && !ran, "{test}: the inbox ran {delivered} twice");

    // A JSON payload for this consumer is poison: the custom deserializer refuses it.
    let poison_id = Uuid::now_v7();
    let order = Order { order: 999, total_cents: 1 };
    let json = OutboundMessage {
        payload: serde_json::to_string(&order).map_err(fail)?,
        payload_type: "Order".to_owned(),
        ..copy(names, poison_id, &order)?
    };
    transport.republish(std::slice::from_ref(&json)).await.map_err(fail)?;
    let reason_of_poison = || {
        running.outcomes().into_iter().find_map(|outcome| match outcome {
            Outcome::Held { id: Some(id), reason, .. }
            | Outcome::DeadLettered { id: Some(id), reason, .. }
                if id == poison_id =>
            {
                Some(reason)
            }
            _ => None,
        })
    };
    eventually("the JSON payload reported as poison", WAIT, || async { Ok(reason_of_poison().is_some()) })
        .await
        .map_err(|error| {
            fail(format!(
                "{test}: {}; outcomes {:?}",
                error.message().unwrap_or_default(),
                running.outcomes()
            ))
        })?;
    let reason = reason_of_poison().unwrap_or_default();
    assert!(
        reason.contains(&poison_id.to_string())
            && reason.contains(EVENT_TYPE)
            && reason.contains("does not decode as")
            && reason.contains("Order")
            && reason.contains("not a v2 order envelope"),
        "{test}: the poison names the event, its type, the target type and the deserializer's reason: {reason}"
    );
    assert_eq!(effects.runs_of(poison_id), 0, "{test}: the effect saw a payload it cannot decode");
    assert!(
        !outbox.inbox(CONSUMER).is_consumed(poison_id).await.map_err(fail)?,
        "{test}: the poison's id was recorded in the inbox"
    );
    eprintln!(
        "{test}: {} generated, {} committed and received once each, {} rolled back, {COPIES} copies answered \
         by the inbox, 1 JSON payload refused as poison",
        issued.len(),
        committed.len(),
        rolled_back.len()
    );
    Ok(())
}

async fn store_tables(outbox: &Outbox, names: &Names) -> TestResult {
    let store = PgStore::from_env(names).ok_or_else(|| fail("ONCEBOX_PG_URL is not set"))?;
    store.create_business_tables(outbox.dialect(), names).await.map_err(fail)
}

/// Inserts `orders` and publishes their events in one transaction (`publish_with` for one,
/// `publish_all` for several), then commits or rolls back; the ids the publisher returned.
async fn place(
    outbox: &Outbox,
    names: &Names,
    orders: &[Order],
    transaction: i64,
    commit: bool,
) -> oncebox::Result<Vec<Uuid>> {
    let database = |context: &'static str| move |error: sqlx::Error| Error::database(context, false, error);
    let mut tx = outbox.dialect().pool().begin().await.map_err(database("begin"))?;
    for order in orders {
        sqlx::query(AssertSqlSafe(format!("INSERT INTO {} (id, total_cents) VALUES ($1, $2)", names.orders)))
            .bind(order.order)
            .bind(order.total_cents)
            .execute(&mut *tx)
            .await
            .map_err(database("inserting an order"))?;
    }
    let ids = match orders {
        [order] => {
            let meta = EventMeta::keyed(format!("customer-{}", transaction % 3));
            vec![outbox.publisher().publish_with(&mut tx, EVENT_TYPE, order, meta).await?]
        }
        _ => outbox.publisher().publish_all(&mut tx, EVENT_TYPE, orders).await?,
    };
    if commit {
        tx.commit().await.map_err(database("commit"))?;
    } else {
        tx.rollback().await.map_err(database("rollback"))?;
    }
    Ok(ids)
}

/// A copy of event `id` as the relay sends it, for re-driving it straight to the broker.
fn copy(names: &Names, id: Uuid, order: &Order) -> Result<OutboundMessage, Failed> {
    let serialized = EnvelopeV2.serialize(order).map_err(fail)?;
    Ok(OutboundMessage {
        id,
        event_type: EVENT_TYPE.to_owned(),
        topic: names.destination.clone(),
        key: id.to_string(),
        payload: serialized.payload,
        payload_type: serialized.payload_type,
        headers: Headers::new(),
        created_at: chrono::Utc::now(),
    })
}

#[test]
fn the_envelope_round_trips_and_refuses_anything_else() -> TestResult {
    let order = Order { order: 7, total_cents: 1250 };
    let serialized = EnvelopeV2.serialize(&order).map_err(fail)?;
    assert_eq!(serialized.payload, "v2;order=7;total=1250");
    assert_eq!(serialized.payload_type, PAYLOAD_TYPE);
    let back = EnvelopeV2.deserialize(serialized.payload.as_bytes(), Some(PAYLOAD_TYPE)).map_err(fail)?;
    assert_eq!(back, order);
    let refusals: [(&[u8], Option<&str>); 6] = [
        (b"v2;order=7;total=1250", None),
        (b"v2;order=7;total=1250", Some("Order")),
        (b"v1;order=7;total=1250", Some(PAYLOAD_TYPE)),
        (b"v2;order=seven;total=1250", Some(PAYLOAD_TYPE)),
        (b"v2;order=7;total=1250;extra=1", Some(PAYLOAD_TYPE)),
        (br#"{"order":7,"total_cents":1250}"#, Some(PAYLOAD_TYPE)),
    ];
    for (payload, payload_type) in refusals {
        let refused = EnvelopeV2.deserialize(payload, payload_type);
        assert!(
            refused.is_err(),
            "{:?} / {payload_type:?} decoded: {refused:?}",
            String::from_utf8_lossy(payload)
        );
    }
    Ok(())
}

#[test]
fn counting_ids_are_deterministic_v8_and_distinct() {
    let ids = CountingIds::new();
    let generated: Vec<Uuid> = (0..100).map(|_| ids.generate()).collect();
    assert_eq!(generated, (1..=100).map(|n| ids.nth(n)).collect::<Vec<_>>());
    assert_eq!(generated, ids.issued());
    assert_eq!(generated.iter().collect::<BTreeSet<_>>().len(), 100);
    assert!(generated.iter().all(|id| id.get_version() == Some(uuid::Version::Custom)));
    let other = CountingIds { namespace: ids.namespace.wrapping_add(1), ..CountingIds::new() };
    assert!(!generated.contains(&other.nth(1)), "another namespace makes other ids");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kafka_round_trips_a_custom_format_and_custom_ids() -> TestResult {
    round_trip::<KafkaTransport>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbit_round_trips_a_custom_format_and_custom_ids() -> TestResult {
    round_trip::<RabbitTransport>().await
}
