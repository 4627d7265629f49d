//! The sender suite: what every transport's [`Sender`] must do against a real broker — deliver
//! payload, key and headers, report one result per message in order and only after the broker
//! acknowledged it, fail fast and temporarily when the broker is unreachable, and fail only the bad
//! message of a batch.
//!
//! A transport crate implements [`SenderHarness`] in its `tests/conformance.rs`; [`MemoryHarness`]
//! runs the suite against the in-memory broker.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use oncebox_core::event::{HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_PAYLOAD_TYPE};
use oncebox_core::{Deadline, Error, ErrorKind, Headers, OutboundMessage, Result, SendError, Sender};
use uuid::Uuid;

use crate::case;
use crate::memory::{MemoryBroker, Subscription};
use crate::runner::{Case, TestResult, fail};

/// A message as a test consumer read it from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Record key (Kafka) or routing key (RabbitMQ), when the transport has one.
    pub key: Option<String>,
    /// Payload text.
    pub payload: String,
    /// Every header, in the order received.
    pub headers: Vec<(String, String)>,
}

impl ReceivedMessage {
    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// Reads what was published to one topic (or exchange) during a test.
#[async_trait]
pub trait TestConsumer: Send {
    /// The next message, or `None` when none arrived within `timeout`.
    async fn next(&mut self, timeout: Duration) -> Result<Option<ReceivedMessage>>;
}

/// A transport under test.
#[async_trait]
pub trait SenderHarness: Send + Sync + 'static {
    /// The transport's sender.
    type Sender: Sender + 'static;

    /// A sender that reaches the broker, set up to publish to `topic` (fresh for each test).
    async fn sender(&self, topic: &str) -> Result<Self::Sender>;

    /// A sender pointed at a broker that is not there (e.g. a closed port).
    async fn unreachable_sender(&self) -> Result<Self::Sender>;

    /// A consumer of `topic` that sees every message published after this call returns.
    async fn consumer(&self, topic: &str) -> Result<Box<dyn TestConsumer>>;

    /// A topic (or exchange) name no other test uses.
    fn fresh_topic(&self) -> String;

    /// A payload the broker refuses (over its size limit), or `None` when it has no limit.
    fn oversized_payload(&self) -> Option<String>;
}

/// Every sender case.
pub fn cases<H: SenderHarness>() -> Vec<Case<H>> {
    vec![
        case!("payload_key_and_headers_round_trip", payload_key_and_headers_round_trip),
        case!("results_are_per_message_in_order_and_mean_delivered", results_mean_delivered),
        case!("an_empty_batch_sends_nothing", an_empty_batch_sends_nothing),
        case!("an_unreachable_broker_fails_every_message_temporarily", unreachable_broker_fails_temporarily),
        case!("one_bad_message_fails_alone", one_bad_message_fails_alone),
    ]
}

/// How long a consumer waits for a message that should arrive.
const ARRIVAL: Duration = Duration::from_secs(30);
/// How long a sender may take to give up on an unreachable broker.
const GIVE_UP: Duration = Duration::from_secs(60);
/// The deadline of a send that should be answered: long enough for a busy broker.
const SEND_DEADLINE: Duration = Duration::from_secs(30);
/// The deadline of a send to a broker that is not there: the sender must return by it.
const UNREACHABLE_DEADLINE: Duration = Duration::from_secs(3);

fn deadline() -> Deadline {
    Deadline::after(SEND_DEADLINE)
}
/// The event type of every test message.
const EVENT_TYPE: &str = "order-created";

/// A message to `topic` whose payload names `index`.
pub fn test_message(topic: &str, index: usize) -> OutboundMessage {
    let id = Uuid::now_v7();
    OutboundMessage {
        id,
        event_type: EVENT_TYPE.to_owned(),
        topic: topic.to_owned(),
        key: id.to_string(),
        payload: format!("{{\"index\":{index}}}"),
        payload_type: "OrderCreated".to_owned(),
        headers: Headers::new(),
        created_at: Utc::now(),
    }
}

/// Reads `count` messages, failing when one does not arrive in time.
async fn receive(
    consumer: &mut dyn TestConsumer,
    count: usize,
) -> std::result::Result<Vec<ReceivedMessage>, libtest_mimic::Failed> {
    let mut received = Vec::with_capacity(count);
    while received.len() < count {
        match consumer.next(ARRIVAL).await.map_err(fail)? {
            Some(message) => received.push(message),
            None => {
                return Err(fail(format!(
                    "only {} of {count} messages arrived within {ARRIVAL:?}",
                    received.len()
                )));
            }
        }
    }
    Ok(received)
}

fn by_event_id(received: Vec<ReceivedMessage>) -> HashMap<String, ReceivedMessage> {
    received
        .into_iter()
        .map(|message| (message.header(HEADER_EVENT_ID).unwrap_or_default().to_owned(), message))
        .collect()
}

async fn payload_key_and_headers_round_trip<H: SenderHarness>(harness: Arc<H>) -> TestResult {
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let sender = harness.sender(&topic).await.map_err(fail)?;
    let mut keyed = test_message(&topic, 0);
    keyed.key = "customer-7".to_owned();
    keyed
        .headers
        .insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    keyed.headers.insert("correlation-id".into(), "order-42 ✓".into());
    let mut unicode = test_message(&topic, 1);
    unicode.payload = "{\"text\":\"注文 🚀 e\u{301} \\\"quoted\\\" \\\\ \"}".to_owned();
    let batch = vec![keyed.clone(), unicode.clone()];

    let results = sender.send(&batch, deadline()).await;
    assert_eq!(results.len(), 2, "one result per message");
    for (result, message) in results.iter().zip(&batch) {
        assert!(result.is_ok(), "message {} was not acknowledged: {result:?}", message.id);
    }
    let received = by_event_id(receive(&mut *consumer, 2).await?);
    for sent in &batch {
        let got =
            received.get(&sent.id.to_string()).ok_or_else(|| fail(format!("{} never arrived", sent.id)))?;
        assert_eq!(got.payload, sent.payload, "payload of {} changed", sent.id);
        if let Some(key) = &got.key {
            assert!(key == &sent.key || key == &sent.event_type, "unexpected key {key} for {}", sent.id);
        }
        assert_eq!(got.header(HEADER_EVENT_TYPE), Some(EVENT_TYPE));
        assert_eq!(got.header(HEADER_PAYLOAD_TYPE), Some("OrderCreated"));
    }
    let got = &received[&keyed.id.to_string()];
    assert_eq!(got.header("correlation-id"), Some("order-42 ✓"), "user headers are delivered");
    assert_eq!(got.header("traceparent"), keyed.headers.get("traceparent").map(String::as_str));
    Ok(())
}

async fn results_mean_delivered<H: SenderHarness>(harness: Arc<H>) -> TestResult {
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let sender = harness.sender(&topic).await.map_err(fail)?;
    // One key, so the broker must keep the order (one partition, one queue).
    let batch: Vec<OutboundMessage> = (0..25)
        .map(|index| OutboundMessage { key: "same-key".into(), ..test_message(&topic, index) })
        .collect();
    let results = sender.send(&batch, deadline()).await;
    assert_eq!(results.len(), batch.len(), "one result per message");
    assert!(results.iter().all(Result::is_ok), "every message should be acknowledged: {results:?}");
    // Ok means acknowledged: every message is readable now, in send order for one key.
    let received = receive(&mut *consumer, batch.len()).await?;
    let received_ids: Vec<&str> =
        received.iter().map(|m| m.header(HEADER_EVENT_ID).unwrap_or_default()).collect();
    let sent_ids: Vec<String> = batch.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(received_ids, sent_ids.iter().map(String::as_str).collect::<Vec<_>>(), "order kept per key");
    Ok(())
}

async fn an_empty_batch_sends_nothing<H: SenderHarness>(harness: Arc<H>) -> TestResult {
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let sender = harness.sender(&topic).await.map_err(fail)?;
    assert!(sender.send(&[], deadline()).await.is_empty());
    assert!(consumer.next(Duration::from_millis(200)).await.map_err(fail)?.is_none());
    Ok(())
}

async fn unreachable_broker_fails_temporarily<H: SenderHarness>(harness: Arc<H>) -> TestResult {
    let topic = harness.fresh_topic();
    let sender = harness.unreachable_sender().await.map_err(fail)?;
    let batch: Vec<OutboundMessage> = (0..3).map(|index| test_message(&topic, index)).collect();
    let results = tokio::time::timeout(GIVE_UP, sender.send(&batch, Deadline::after(UNREACHABLE_DEADLINE)))
        .await
        .map_err(|_| fail(format!("send to an unreachable broker did not return within {GIVE_UP:?}")))?;
    assert_eq!(results.len(), batch.len(), "one result per message");
    for result in &results {
        let error =
            result.as_ref().err().ok_or_else(|| fail("an unreachable broker acknowledged a message"))?;
        assert!(error.is_temporary(), "an unreachable broker is a temporary failure: {error}");
    }
    Ok(())
}

async fn one_bad_message_fails_alone<H: SenderHarness>(harness: Arc<H>) -> TestResult {
    let Some(oversized) = harness.oversized_payload() else {
        eprintln!("skipped: the broker has no payload size limit to exceed");
        return Ok(());
    };
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let sender = harness.sender(&topic).await.map_err(fail)?;
    let mut batch: Vec<OutboundMessage> = (0..4).map(|index| test_message(&topic, index)).collect();
    batch[1].payload = oversized;
    let results = sender.send(&batch, deadline()).await;
    assert_eq!(results.len(), batch.len(), "one result per message");
    assert!(results[1].is_err(), "the oversized message must fail");
    for index in [0, 2, 3] {
        assert!(results[index].is_ok(), "message {index} failed with its neighbour: {:?}", results[index]);
    }
    let received = by_event_id(receive(&mut *consumer, 3).await?);
    for index in [0, 2, 3] {
        assert!(received.contains_key(&batch[index].id.to_string()), "message {index} never arrived");
    }
    assert!(
        consumer.next(Duration::from_secs(1)).await.map_err(fail)?.is_none(),
        "the refused message must not arrive"
    );
    Ok(())
}

// ---- the in-memory broker as a transport ------------------------------------------------------

/// Payloads above this many bytes are refused by [`MemorySender`] unless configured otherwise.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// A [`Sender`] over a [`MemoryBroker`] that, like a real broker, refuses payloads above a size
/// limit with a permanent error for that message alone.
#[derive(Clone)]
pub struct MemorySender {
    broker: MemoryBroker,
    max_payload_bytes: usize,
}

impl MemorySender {
    /// Sends through `broker`, refusing payloads longer than `max_payload_bytes`.
    pub fn new(broker: MemoryBroker, max_payload_bytes: usize) -> Self {
        Self { broker, max_payload_bytes }
    }
}

#[async_trait]
impl Sender for MemorySender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        let fitting: Vec<OutboundMessage> =
            batch.iter().filter(|message| message.payload.len() <= self.max_payload_bytes).cloned().collect();
        let mut delivered = self.broker.send(&fitting, deadline).await.into_iter();
        batch
            .iter()
            .map(|message| {
                if message.payload.len() > self.max_payload_bytes {
                    Err(Error::new(
                        ErrorKind::Broker,
                        format!(
                            "message {} has a {}-byte payload; the limit is {} bytes",
                            message.id,
                            message.payload.len(),
                            self.max_payload_bytes
                        ),
                    ))
                } else {
                    delivered.next().unwrap_or_else(|| {
                        Err(Error::new(ErrorKind::Broker, format!("no result for message {}", message.id)))
                    })
                }
            })
            .collect()
    }
}

/// [`SenderHarness`] over the in-memory broker.
pub struct MemoryHarness {
    broker: MemoryBroker,
    max_payload_bytes: usize,
    topics: AtomicU64,
}

impl Default for MemoryHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryHarness {
    /// A harness over a new broker refusing payloads above [`DEFAULT_MAX_PAYLOAD_BYTES`].
    pub fn new() -> Self {
        Self {
            broker: MemoryBroker::new(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            topics: AtomicU64::new(0),
        }
    }

    /// The broker the harness's senders reach.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }
}

struct MemoryConsumer {
    subscription: Subscription,
}

#[async_trait]
impl TestConsumer for MemoryConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<ReceivedMessage>> {
        match tokio::time::timeout(timeout, self.subscription.recv()).await {
            Err(_) | Ok(None) => Ok(None),
            Ok(Some(message)) => Ok(Some(ReceivedMessage {
                key: Some(message.key.clone()),
                payload: message.payload.clone(),
                headers: message.wire_headers(),
            })),
        }
    }
}

#[async_trait]
impl SenderHarness for MemoryHarness {
    type Sender = MemorySender;

    async fn sender(&self, _topic: &str) -> Result<MemorySender> {
        Ok(MemorySender::new(self.broker.clone(), self.max_payload_bytes))
    }

    async fn unreachable_sender(&self) -> Result<MemorySender> {
        let broker = MemoryBroker::new();
        broker.set_down(true);
        Ok(MemorySender::new(broker, self.max_payload_bytes))
    }

    async fn consumer(&self, topic: &str) -> Result<Box<dyn TestConsumer>> {
        Ok(Box::new(MemoryConsumer { subscription: self.broker.subscribe(topic) }))
    }

    fn fresh_topic(&self) -> String {
        format!("oncebox-test-{}", self.topics.fetch_add(1, Ordering::Relaxed))
    }

    fn oversized_payload(&self) -> Option<String> {
        Some("x".repeat(self.max_payload_bytes + 1))
    }
}
