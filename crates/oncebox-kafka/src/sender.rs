//! [`KafkaSender`]: pipelined, acknowledged, keyed delivery through one rdkafka `FutureProducer`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::config::TransportKind;
use oncebox_core::sender::unanswered_as_timeouts;
use oncebox_core::{Deadline, Error, ErrorKind, OutboundMessage, Result, SendError, Sender};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use crate::config::{DEFAULT_EMERGENCY_TIMEOUT, KafkaSenderConfig, MAX_EMERGENCY_TIMEOUT};
use crate::error::{creation_error, needs_new_producer, produce_error};
use crate::record::record_headers;

/// How long to wait for room in librdkafka's queue when the queue is full of other batches'
/// records (ours are awaited instead).
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(5);

/// Delivers outbox messages to Kafka.
///
/// A batch is enqueued in full without waiting, then every delivery report is awaited; a message
/// is `Ok` only after its report says the record was written with `acks=all`. Topic =
/// [`OutboundMessage::topic`], key = [`OutboundMessage::key`] (the partition key, or the event
/// id), headers = `oncebox_event_id`, `oncebox_event_type`, `oncebox_payload_type` and the
/// event's stored headers, as raw UTF-8.
///
/// Each send stops at the deadline the engine hands it, and the producer's `message.timeout.ms`
/// is the engine's emergency timeout (adopted at start; [`DEFAULT_EMERGENCY_TIMEOUT`] before), so
/// librdkafka gives a record up one emergency timeout after it was queued: about when its batch
/// is settled (later by as long as the record waited for room in a full queue).
///
/// The sender holds one producer, shared by every poller. After librdkafka reports a fatal error
/// (the idempotent producer can reach one) the producer is replaced by a new one for the next
/// batch. [`Sender::flush`] waits for buffered records at shutdown.
pub struct KafkaSender {
    config: KafkaSenderConfig,
    current: Mutex<Current>,
}

/// The producer in use, how many producers came before it, how many of those were replaced after
/// a fatal error, and the emergency timeout it was created with (whether an engine handed it over).
struct Current {
    producer: Arc<FutureProducer>,
    generation: u64,
    rebuilds: u64,
    emergency_timeout: Duration,
    adopted: bool,
}

impl fmt::Debug for KafkaSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSender").field("config", &self.config).finish_non_exhaustive()
    }
}

impl KafkaSender {
    /// A sender for `config`. Checks the settings and creates the producer, which connects in the
    /// background, so a service can start while Kafka is down. Warns when a pass-through property
    /// weakens `acks=all` or idempotence.
    pub fn new(config: KafkaSenderConfig) -> Result<Self> {
        config.validate()?;
        for weakened in config.weakened_settings() {
            tracing::warn!(setting = %weakened, "Kafka producer setting weaker than oncebox's default");
        }
        let emergency_timeout = DEFAULT_EMERGENCY_TIMEOUT;
        let producer = create_producer(&config, emergency_timeout)?;
        let current = Current { producer, generation: 0, rebuilds: 0, emergency_timeout, adopted: false };
        Ok(Self { config, current: Mutex::new(current) })
    }

    /// The settings.
    pub fn config(&self) -> &KafkaSenderConfig {
        &self.config
    }

    /// How many times the producer was replaced after a fatal error.
    pub fn rebuilds(&self) -> u64 {
        self.current().rebuilds
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn producer(&self) -> (Arc<FutureProducer>, u64) {
        let current = self.current();
        (current.producer.clone(), current.generation)
    }

    /// The emergency timeout the producer was created with (`message.timeout.ms`).
    pub fn emergency_timeout(&self) -> Duration {
        self.current().emergency_timeout
    }

    /// Reaches the cluster now, within `timeout`, instead of at the first batch, so start-up can
    /// fail fast on a wrong bootstrap address, a closed port or refused credentials. It asks a
    /// broker for the cluster's metadata through the sender's own producer (a blocking librdkafka
    /// call, so it runs on tokio's blocking pool). The error names the bootstrap servers.
    pub async fn connect(&self, timeout: Duration) -> Result<()> {
        let (producer, _) = self.producer();
        let answered =
            tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, timeout).map(|_| ()))
                .await
                .map_err(|error| {
                    Error::new(ErrorKind::Other, format!("the Kafka metadata request failed: {error}"))
                })?;
        answered.map_err(|error| {
            Error::temporary(
                ErrorKind::Broker,
                format!(
                    "cannot reach Kafka at {} within {timeout:?}: {error}",
                    self.config.bootstrap_servers()
                ),
            )
        })
    }

    /// Replaces the producer of `generation` (unless another batch, or an adopted timeout,
    /// already did).
    fn rebuild(&self, generation: u64, reason: &str) {
        let emergency_timeout = {
            let current = self.current();
            if current.generation != generation {
                return;
            }
            current.emergency_timeout
        };
        let fresh = match create_producer(&self.config, emergency_timeout) {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::error!(%error, "could not create a new Kafka producer; keeping the failed one");
                return;
            }
        };
        let old = {
            let mut current = self.current();
            if current.generation != generation {
                return;
            }
            current.generation += 1;
            current.rebuilds += 1;
            std::mem::replace(&mut current.producer, fresh)
        };
        tracing::warn!(%reason, "the Kafka producer hit a fatal error; replaced it with a new one");
        retire(old);
    }

    /// Drops a batch's handle on `producer`, off the async threads when it was the last one (the
    /// producer was replaced while the batch used it).
    fn release(producer: Arc<FutureProducer>) {
        if Arc::strong_count(&producer) == 1 {
            retire(producer);
        }
    }
}

/// Drops a replaced producer off the async threads: dropping purges and flushes it, which blocks
/// for up to half a second.
fn retire(producer: Arc<FutureProducer>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(producer))),
        Err(_) => drop(producer),
    }
}

fn create_producer(config: &KafkaSenderConfig, emergency_timeout: Duration) -> Result<Arc<FutureProducer>> {
    let client = config.client_config(emergency_timeout);
    client
        .create::<FutureProducer>()
        .map(Arc::new)
        .map_err(|error| creation_error("producer", &client, error))
}

/// What a delivery report says about `message`; `fatal` is set when the producer must be replaced.
fn delivery_result(
    message: &OutboundMessage,
    report: Result<OwnedDeliveryResult, futures::channel::oneshot::Canceled>,
    fatal: &mut bool,
) -> Result<(), SendError> {
    match report {
        Ok(Ok(_delivery)) => Ok(()),
        Ok(Err((error, _record))) => {
            *fatal |= needs_new_producer(&error);
            Err(produce_error(
                format!("Kafka did not acknowledge message {} on topic '{}'", message.id, message.topic),
                error,
            ))
        }
        Err(_) => Err(Error::temporary(
            ErrorKind::Broker,
            format!("the producer was replaced before reporting the delivery of message {}", message.id),
        )),
    }
}

#[async_trait]
impl Sender for KafkaSender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        let (producer, generation) = self.producer();
        let mut results: Vec<Option<Result<(), SendError>>> = (0..batch.len()).map(|_| None).collect();
        let mut fatal = false;
        let delivering = deliver(&producer, batch, &mut results, &mut fatal);
        if deadline.bound(delivering).await.is_none() {
            tracing::warn!(
                messages = batch.len(),
                timeout = ?deadline.timeout(),
                "Kafka batch hit the emergency timeout"
            );
        }
        let fatal_state = producer.client().fatal_error();
        if fatal || fatal_state.is_some() {
            let reason = fatal_state.map_or_else(
                || "a delivery report was fatal".to_owned(),
                |(code, text)| format!("{code:?}: {text}"),
            );
            self.rebuild(generation, &reason);
        }
        Self::release(producer);
        unanswered_as_timeouts(results, batch, &deadline, "acknowledged")
    }

    /// Kafka, checked against `oncebox.outbox.sender.type` at start.
    fn transport(&self) -> Option<TransportKind> {
        Some(TransportKind::Kafka)
    }

    /// Checks `timeout` against librdkafka's range and the user's own delivery timeouts, and
    /// re-creates the producer with it as `message.timeout.ms` when it differs. Once an engine
    /// handed one over, a different one is refused: the producer would change under the first
    /// engine's sends (give each engine its own sender).
    fn adopt_emergency_timeout(&self, timeout: Duration) -> Result<()> {
        self.config.check_emergency_timeout(timeout)?;
        let (adopted, current) = {
            let current = self.current();
            (current.adopted, current.emergency_timeout)
        };
        if current == timeout {
            self.current().adopted = true;
            return Ok(());
        }
        if adopted {
            return Err(Error::config(
                "oncebox.outbox.sender.emergency-timeout",
                format!(
                    "{timeout:?} differs from the {current:?} this Kafka sender already took from another \
                     engine; give each engine its own sender"
                ),
            ));
        }
        let fresh = create_producer(&self.config, timeout)?;
        let old = {
            let mut current = self.current();
            current.generation += 1;
            current.emergency_timeout = timeout;
            current.adopted = true;
            std::mem::replace(&mut current.producer, fresh)
        };
        retire(old);
        Ok(())
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        // librdkafka takes the flush timeout as an `i32` of milliseconds, and rdkafka adds it to
        // the clock unchecked: a longer timeout (`Duration::MAX` for "as long as it takes")
        // saturates at about 24.8 days instead of overflowing.
        let timeout = timeout.min(MAX_EMERGENCY_TIMEOUT);
        let (producer, _) = self.producer();
        let flushing = tokio::task::spawn_blocking(move || {
            let outcome = producer.flush(timeout);
            (outcome, producer.in_flight_count())
        });
        match flushing.await {
            Ok((Ok(()), _)) => Ok(()),
            Ok((Err(error), unacknowledged)) => Err(Error::temporary(
                ErrorKind::Timeout,
                format!("{unacknowledged} Kafka records were still unacknowledged after {timeout:?}"),
            )
            .with_source(error)),
            Err(error) => Err(Error::new(ErrorKind::Other, format!("the flush task failed: {error}"))),
        }
    }
}

/// Enqueues every message, then awaits every delivery report; fills `results` as outcomes become
/// known, so a timeout leaves only the unknown ones empty.
async fn deliver(
    producer: &FutureProducer,
    batch: &[OutboundMessage],
    results: &mut [Option<Result<(), SendError>>],
    fatal: &mut bool,
) {
    let mut pending: VecDeque<(usize, DeliveryFuture)> = VecDeque::with_capacity(batch.len());
    for (index, message) in batch.iter().enumerate() {
        let key = if message.key.is_empty() { message.id.to_string() } else { message.key.clone() };
        // No record timestamp: the broker's time, not the event's, so topic retention does not
        // delete an old (e.g. re-driven) event the moment it is written.
        let mut record = FutureRecord::to(&message.topic)
            .key(key.as_bytes())
            .payload(message.payload.as_bytes())
            .headers(record_headers(message));
        loop {
            match producer.send_result(record) {
                Ok(report) => {
                    pending.push_back((index, report));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    // Room comes from deliveries: ours first, else other batches'.
                    record = returned;
                    match pending.pop_front() {
                        Some((done, report)) => {
                            results[done] = Some(delivery_result(&batch[done], report.await, fatal));
                        }
                        None => tokio::time::sleep(QUEUE_FULL_PAUSE).await,
                    }
                }
                Err((error, _)) => {
                    *fatal |= needs_new_producer(&error);
                    results[index] = Some(Err(produce_error(
                        format!("Kafka refused message {} for topic '{}'", message.id, message.topic),
                        error,
                    )));
                    break;
                }
            }
        }
    }
    for (index, report) in pending {
        results[index] = Some(delivery_result(&batch[index], report.await, fatal));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    fn runtime() -> tokio::runtime::Runtime {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => panic!("test runtime: {error}"),
        }
    }

    #[test]
    fn a_flush_with_an_endless_timeout_does_not_panic() -> Result<()> {
        // Nothing is queued, so the flush returns at once; the timeout only has to be accepted.
        let runtime = runtime();
        let _entered = runtime.enter();
        let sender = KafkaSender::new(KafkaSenderConfig::new("127.0.0.1:1"))?;
        runtime.block_on(sender.flush(Duration::MAX))
    }

    #[test]
    fn a_refused_credential_never_reaches_the_error_text() {
        // `sasl.jaas.config` is a Java client property librdkafka does not know; without the `ssl`
        // feature librdkafka also refuses `ssl.key.password` and the OAUTHBEARER secret.
        let cases = [
            ("sasl.jaas.config", "PlainLoginModule required username=\"u\" password=\"jaas-4711\";"),
            ("ssl.key.password", "key-pass-4711"),
            ("sasl.oauthbearer.client.secret", "oauth-secret-4711"),
            ("sasl.password", "sasl-pass-4711"),
        ];
        for (key, value) in cases {
            let config = KafkaSenderConfig::new("127.0.0.1:1").with_producer_property(key, value);
            if let Err(error) = KafkaSender::new(config) {
                let text = format!("{error} | {error:?} | {:?}", std::error::Error::source(&error));
                assert!(!text.contains("4711"), "{key}: {text}");
                assert!(text.contains(key), "{key}: the error names the property: {text}");
            }
        }
        let config =
            KafkaSenderConfig::new("127.0.0.1:1").with_producer_property("sasl.jaas.config", "x-4711");
        assert!(KafkaSender::new(config).is_err(), "librdkafka has no sasl.jaas.config");
        #[cfg(not(feature = "ssl"))]
        {
            let config =
                KafkaSenderConfig::new("127.0.0.1:1").with_producer_property("ssl.key.password", "k-4711");
            assert!(KafkaSender::new(config).is_err(), "without OpenSSL ssl.key.password is refused");
        }
    }

    #[test]
    fn tls_and_scram_work_exactly_with_the_ssl_feature() {
        let config = KafkaSenderConfig::new("127.0.0.1:1")
            .with_producer_property("security.protocol", "SASL_SSL")
            .with_producer_property("sasl.mechanisms", "SCRAM-SHA-512")
            .with_producer_property("sasl.username", "billing")
            .with_producer_property("sasl.password", "scram-4711");
        let created = KafkaSender::new(config);
        // Creating the producer does not connect, so no broker is needed.
        #[cfg(feature = "ssl")]
        assert!(created.is_ok(), "{created:?}");
        #[cfg(not(feature = "ssl"))]
        {
            let text = created.err().map(|error| error.to_string()).unwrap_or_default();
            assert!(text.contains("kafka.producer") && !text.contains("4711"), "{text}");
        }
    }

    #[test]
    fn it_reports_kafka_for_the_sender_type_check() -> Result<()> {
        let sender = KafkaSender::new(KafkaSenderConfig::new("127.0.0.1:1"))?;
        assert_eq!(sender.transport(), Some(TransportKind::Kafka));
        Ok(())
    }

    #[test]
    fn the_engines_emergency_timeout_becomes_the_producers_message_timeout() -> Result<()> {
        let sender = KafkaSender::new(KafkaSenderConfig::new("127.0.0.1:1"))?;
        assert_eq!(sender.emergency_timeout(), DEFAULT_EMERGENCY_TIMEOUT);
        sender.adopt_emergency_timeout(Duration::from_secs(7))?;
        assert_eq!(sender.emergency_timeout(), Duration::from_secs(7));
        let strict = KafkaSender::new(
            KafkaSenderConfig::new("127.0.0.1:1").with_producer_property("message.timeout.ms", "60000"),
        )?;
        let text = strict.adopt_emergency_timeout(Duration::from_secs(10)).err().map(|e| e.to_string());
        assert!(text.is_some_and(|text| text.contains("kafka.producer.message.timeout.ms")));
        assert_eq!(
            strict.emergency_timeout(),
            DEFAULT_EMERGENCY_TIMEOUT,
            "a refused timeout changes nothing"
        );
        // A second engine with the same timeout may share the sender; another timeout may not.
        sender.adopt_emergency_timeout(Duration::from_secs(7))?;
        let text = sender.adopt_emergency_timeout(Duration::from_secs(9)).err().map(|e| e.to_string());
        assert!(text.is_some_and(|text| text.contains("its own sender")));
        assert_eq!((sender.emergency_timeout(), sender.rebuilds()), (Duration::from_secs(7), 0));
        Ok(())
    }

    #[test]
    fn sender_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<KafkaSender>();
    }

    #[test]
    fn headers_carry_the_event_identity_and_stored_headers_as_utf8() {
        let mut message = OutboundMessage {
            id: uuid::Uuid::now_v7(),
            event_type: "order-created".into(),
            topic: "orders".into(),
            key: "customer-7".into(),
            payload: "{}".into(),
            payload_type: "OrderCreated".into(),
            headers: oncebox_core::Headers::new(),
            created_at: chrono::Utc::now(),
        };
        message.headers.insert("traceparent".into(), "00-ab-cd-01".into());
        message.headers.insert("oncebox_event_id".into(), "forged".into());
        let headers = record_headers(&message);
        let pairs: Vec<(String, String)> = headers
            .iter()
            .map(|header| {
                (
                    header.key.to_owned(),
                    String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned(),
                )
            })
            .collect();
        let id = message.id.to_string();
        assert_eq!(pairs[0], ("oncebox_event_id".to_owned(), id));
        assert_eq!(pairs[1], ("oncebox_event_type".to_owned(), "order-created".to_owned()));
        assert_eq!(pairs[2], ("oncebox_payload_type".to_owned(), "OrderCreated".to_owned()));
        assert_eq!(pairs[3].0, "oncebox_created_at");
        assert_eq!(pairs[4], ("traceparent".to_owned(), "00-ab-cd-01".to_owned()));
        assert_eq!(pairs.len(), 5, "a stored header cannot override an oncebox_* one: {pairs:?}");
    }
}
