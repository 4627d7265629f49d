//! The broker side of a suite, one [`Transport`] per broker: the real sender the relay uses, the
//! transport's own listener handing each event to a handler, re-publishing copies of delivered
//! events, and creating and removing a run's topic or queue.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicGetOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};
use oncebox::consume::{ListenerBuilder, ListenerConfig, Received};
use oncebox::kafka::{KafkaListener, KafkaListenerConfig, KafkaSender, KafkaSenderConfig};
use oncebox::rabbit::{
    RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig, RabbitTopology,
};
use oncebox::{Consumed, Deadline, OutboundMessage, Result, Sender};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::plumbing;
use crate::store::{Names, Order, server_url};

/// How long a sender waits for the broker's acknowledgement of a batch, unless told otherwise.
pub const EMERGENCY_TIMEOUT: Duration = Duration::from_secs(5);
/// A listener retries a failed handler after this, doubling up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(20);
/// The longest wait before a listener retries a failed handler.
const RETRY_MAX: Duration = Duration::from_millis(200);
/// Partitions of a run's Kafka topic.
const TOPIC_PARTITIONS: i32 = 2;
/// The Kafka group session timeout of a listener.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// How long after the session timeout a member that died is surely gone from the group.
const SESSION_EXPIRY_MARGIN: Duration = Duration::from_secs(2);
/// How often a Kafka listener tells the group it is alive, in milliseconds.
const HEARTBEAT_INTERVAL_MS: &str = "1000";
/// The AMQP heartbeat of the chaos consumers, in seconds (the URL's `heartbeat` parameter).
const CONSUMER_HEARTBEAT_SECS: u64 = 2;
/// How long a stalled run's probe waits for the broker to return a record.
const PROBE_FETCH: Duration = Duration::from_secs(10);
/// How long a set-up step (topic creation, queue declaration) may take.
const SET_UP: Duration = Duration::from_secs(30);
/// Failed runs of a handler after which a listener with a dead-letter destination gives the event
/// up (RabbitMQ's default): more than the chaos ledger's failing events fail.
pub const MAX_ATTEMPTS: u32 = 5;

/// The future of an [`EventHandler`].
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Consumed<()>>> + Send>>;

/// What a listener does with each delivery: the event id and its decoded payload in, applied or
/// duplicate out; an error makes the listener retry the delivery.
pub type EventHandler = Arc<dyn Fn(Uuid, Order) -> HandlerFuture + Send + Sync>;

/// The future of an [`EventNote`].
pub type NoteFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Something done with an event id: the effect an `on_once` registration runs (its error makes the
/// listener retry the delivery), or the note of a delivery the inbox answered as a duplicate.
pub type EventNote = Arc<dyn Fn(Uuid) -> NoteFuture + Send + Sync>;

/// Hands every [`Outcome::Duplicate`](oncebox::consume::Outcome::Duplicate) a listener reports to
/// `duplicate`, on a task of its own that ends with the listener's outcomes channel. Outcomes
/// are reported after the message was settled; a subscriber that falls behind by more than the
/// channel holds misses some, which only makes the duplicates counted fewer.
fn note_duplicates(
    mut outcomes: tokio::sync::broadcast::Receiver<oncebox::consume::Outcome>,
    duplicate: EventNote,
) {
    tokio::spawn(async move {
        loop {
            match outcomes.recv().await {
                Ok(oncebox::consume::Outcome::Duplicate { id }) => {
                    if let Err(error) = duplicate(id).await {
                        eprintln!("noting a duplicate of event {id} failed: {error}");
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
}

/// `builder` with `handler` registered for each of `event_types`, whatever the broker.
fn on_each<C: ListenerConfig>(
    builder: ListenerBuilder<C>,
    event_types: &[&str],
    handler: &EventHandler,
) -> ListenerBuilder<C> {
    event_types.iter().fold(builder, |builder, event_type| {
        let handler = handler.clone();
        builder.on(*event_type, move |event: Received<Order, C::Source>| handler(event.id, event.payload))
    })
}

/// `builder` with `effect` registered through `inbox` (`on_once`) for each of `event_types`.
fn once_each<C: ListenerConfig, W: Clone + Send + Sync + 'static>(
    builder: ListenerBuilder<C>,
    event_types: &[&str],
    inbox: &oncebox::Inbox<W>,
    effect: &EventNote,
) -> ListenerBuilder<C> {
    event_types.iter().fold(builder, |builder, event_type| {
        let effect = effect.clone();
        builder.on_once(*event_type, inbox.clone(), move |event: Received<Order, C::Source>| effect(event.id))
    })
}

/// `builder` with every one of `event_types` stored in the durable inbox `inbox` (`store_in`): each
/// message is acknowledged once its row committed, and the inbox's processor handles it.
fn store_each<C: ListenerConfig>(
    builder: ListenerBuilder<C>,
    event_types: &[&str],
    inbox: &oncebox::stored::StoredInbox,
) -> ListenerBuilder<C>
where
    C::Source: std::fmt::Display,
{
    builder.store_in(event_types.iter().copied(), inbox)
}

/// A listener running on its own task.
pub struct Listening {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<()>>,
}

impl Listening {
    fn spawn<F>(run: impl FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> F) -> Self
    where
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Self { stop, task: tokio::spawn(run(shutdown)) }
    }

    /// Asks the listener to stop and waits for it; its error, if it failed.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.task.await.map_err(|error| plumbing("the listener task", error))?
    }

    /// Listens until `stop` completes, then stops; a listener that ends by itself first ends this
    /// too, with its error, so that a process built on it never keeps running deaf.
    pub async fn until(mut self, stop: impl Future<Output = ()>) -> Result<()> {
        tokio::select! {
            () = stop => self.stop().await,
            ended = &mut self.task => {
                ended.map_err(|error| plumbing("the listener task", error))??;
                Err(plumbing("the listener", "it stopped by itself"))
            }
        }
    }
}

/// One broker under test, named by an environment variable.
pub trait Transport: Sized + Send + Sync + 'static {
    /// Short name used in test names (`kafka`, `rabbit`).
    const NAME: &'static str;
    /// The variable naming the broker.
    const VARIABLE: &'static str;

    /// How long a killed consumer stays down before the chaos harness starts it again.
    const CONSUMER_DOWN_AT_LEAST: Duration = Duration::ZERO;

    /// How long the broker takes at most to give a silent (stopped) consumer's unacknowledged
    /// messages or partitions to another consumer, with [`Transport::consumer_variables`].
    const SILENT_CONSUMER_NOTICED_AFTER: Duration;

    /// Variables for the chaos consumers over the servers' own: on RabbitMQ, the broker address
    /// with a short heartbeat, so that a stopped consumer is noticed in seconds.
    fn consumer_variables(_variable: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// What `names.consumer` has yet to finish: the RabbitMQ queue's messages, ready and
    /// unacknowledged; or the Kafka group's lag, summed over the partitions (high watermark minus
    /// committed offset). Zero once every delivery is acknowledged.
    fn backlog(&self, names: &Names) -> impl Future<Output = Result<u64>> + Send;

    /// The transport its server variable names, read through `variable` (the environment, or the
    /// environment with a private broker's address in place of the shared one); `None` when the
    /// variable is not set.
    fn from_variables(variable: &dyn Fn(&str) -> Option<String>) -> Option<Self>;

    /// The transport configured by the environment, `None` when its variable is not set.
    fn from_env() -> Option<Self> {
        Self::from_variables(&server_url)
    }

    /// Creates what must exist before anything is published to `names.destination`, and the
    /// dead-letter topic of `names`; a second listener of the run may prepare the same
    /// destination again.
    fn prepare(&self, names: &Names) -> impl Future<Output = Result<()>> + Send;

    /// A new sender for the relay (the engine hands it the emergency timeout).
    fn sender(&self) -> Result<Arc<dyn Sender>>;

    /// Starts the transport's listener on `names.consumer`, handing every delivery of each of
    /// `event_types` to `handler`; returns once deliveries published from now on reach it.
    fn listen(
        &self,
        names: &Names,
        event_types: &[&str],
        handler: EventHandler,
    ) -> impl Future<Output = Result<Listening>> + Send;

    /// Starts the transport's listener on `names.consumer` with each of `event_types` registered
    /// through the listener's `on_once` over `inbox` (claim the id, run `effect`, mark it applied;
    /// release it when `effect` fails), handing every delivery the inbox answers as a duplicate to
    /// `duplicate`; returns once deliveries published from now on reach it.
    fn listen_once<W: Clone + Send + Sync + 'static>(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: oncebox::Inbox<W>,
        effect: EventNote,
        duplicate: EventNote,
    ) -> impl Future<Output = Result<Listening>> + Send;

    /// Starts the transport's listener on `names.consumer` with each of `event_types` stored in the
    /// durable inbox `inbox` (`store_in`: the message is acknowledged once its row committed, a
    /// redelivered id makes no second row and is acknowledged as a duplicate), handing every
    /// delivery the listener reports as a duplicate to `duplicate`; returns once deliveries
    /// published from now on reach it. The inbox's processor, not the listener, runs the handlers.
    fn listen_store(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: &oncebox::stored::StoredInbox,
        duplicate: EventNote,
    ) -> impl Future<Output = Result<Listening>> + Send;

    /// Removes what a second listener of the run's topic or exchange made (its queue, its
    /// dead-letter queue, exchange or topic), leaving the topic or exchange itself.
    fn dispose_listener(&self, names: &Names) -> impl Future<Output = Result<()>> + Send;

    /// Waits until a listener started on `names.consumer` (in this or another process) receives
    /// what is published from now on.
    fn await_listener(&self, names: &Names) -> impl Future<Output = Result<()>> + Send;

    /// What the broker holds for the run's listeners, for a run that stalled: per Kafka partition
    /// the group's committed offset and the high watermark, and where in the topic the `lost`
    /// events are (if anywhere); or the RabbitMQ queue's ready messages and consumers. Never
    /// fails: what cannot be read is said in the text.
    fn describe(&self, names: &Names, lost: &[Uuid]) -> impl Future<Output = String> + Send;

    /// Sends `messages` again through a sender of its own, as the relay does after a lost
    /// acknowledgement; fails unless the broker acknowledged every one.
    fn republish(&self, messages: &[OutboundMessage]) -> impl Future<Output = Result<()>> + Send;

    /// The ids of the events in `names.dead_letter` (none without one): every record of the Kafka
    /// topic, read from its start; or the messages of the RabbitMQ dead-letter queue, which are
    /// taken off it, so each is returned once.
    fn dead_lettered(&self, names: &Names) -> impl Future<Output = Result<Vec<Uuid>>> + Send;

    /// Removes the run's topic or queue and exchange (and the dead-letter ones).
    fn dispose(&self, names: &Names) -> impl Future<Output = Result<()>> + Send;
}

fn all_acknowledged(results: Vec<std::result::Result<(), oncebox::SendError>>) -> Result<()> {
    for result in results {
        result.map_err(|error| plumbing("re-publishing a delivered event", error))?;
    }
    Ok(())
}

/// A Kafka-protocol broker at `ONCEBOX_KAFKA_BOOTSTRAP`; each run has its own topic (two
/// partitions) and consumer group.
pub struct KafkaTransport {
    bootstrap: String,
}

impl KafkaTransport {
    /// The config of every producer of a run: one record per produce batch, so every offset a
    /// group commits is the start of a batch. The test broker (tansu 0.6) answers no fetch that
    /// starts inside a batch, so a group resuming a partition there, after a rebalance or a
    /// consumer kill, would stall for good (docs/kafka.md). Apache Kafka serves such fetches; the
    /// setting is for the test broker only.
    fn sender_config(&self) -> KafkaSenderConfig {
        KafkaSenderConfig::new(&self.bootstrap).with_producer_property("batch.num.messages", "1")
    }

    fn admin(&self) -> Result<AdminClient<DefaultClientContext>> {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|error| plumbing("Kafka admin client", error))
    }

    /// The listener configuration of `names`: its group on the run's topic, quick retries, a
    /// short session, and the dead-letter topic when the run has one.
    fn listener_config(&self, names: &Names) -> KafkaListenerConfig {
        let config = KafkaListenerConfig::new(&self.bootstrap, &names.consumer, [names.destination.as_str()])
            .with_retry_backoff(RETRY_MIN, RETRY_MAX)
            // A member that died is noticed after this rather than librdkafka's 45 s, so its
            // partitions move to a live member while a run still waits for them.
            .with_consumer_property("session.timeout.ms", SESSION_TIMEOUT.as_millis().to_string())
            .with_consumer_property("heartbeat.interval.ms", HEARTBEAT_INTERVAL_MS);
        // librdkafka's own debug contexts (`fetch`, `cgrp`, …) for a run being diagnosed; they reach
        // the process log with `RUST_LOG=librdkafka=debug`.
        let config = match std::env::var("ONCEBOX_KAFKA_DEBUG") {
            Ok(contexts) if !contexts.trim().is_empty() => config.with_consumer_property("debug", contexts),
            _ => config,
        };
        match &names.dead_letter {
            Some(topic) => config.with_dead_letter_topic(topic).with_max_attempts(MAX_ATTEMPTS),
            None => config,
        }
    }
}

impl Transport for KafkaTransport {
    const NAME: &'static str = "kafka";
    const VARIABLE: &'static str = "ONCEBOX_KAFKA_BOOTSTRAP";
    /// Past the group's session timeout, because of the test broker (tansu 0.6): when a member's
    /// session expires after a join that still listed it (its replacement joined first), tansu
    /// rebalances without a new generation and hands every member its previous assignment, so
    /// the dead member's partitions stay with it and nobody consumes them again. A replacement
    /// that joins after the expiry gets a new generation and a fresh assignment. Apache Kafka
    /// waits for every listed member to rejoin instead; the delay is for the test broker only
    /// (docs/kafka.md).
    const CONSUMER_DOWN_AT_LEAST: Duration = SESSION_TIMEOUT.saturating_add(SESSION_EXPIRY_MARGIN);
    /// The session timeout: a member that sent no heartbeat for so long is dropped from the group.
    const SILENT_CONSUMER_NOTICED_AFTER: Duration = SESSION_TIMEOUT.saturating_add(SESSION_EXPIRY_MARGIN);

    async fn backlog(&self, names: &Names) -> Result<u64> {
        let (bootstrap, group, topic) =
            (self.bootstrap.clone(), names.consumer.clone(), names.destination.clone());
        tokio::task::spawn_blocking(move || kafka_lag(&bootstrap, &group, &topic))
            .await
            .map_err(|error| plumbing("reading the group's lag", error))?
    }

    fn from_variables(variable: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        variable(Self::VARIABLE).map(|bootstrap| Self { bootstrap })
    }

    async fn prepare(&self, names: &Names) -> Result<()> {
        let mut topics =
            vec![NewTopic::new(&names.destination, TOPIC_PARTITIONS, TopicReplication::Fixed(1))];
        if let Some(dead_letter) = &names.dead_letter {
            topics.push(NewTopic::new(dead_letter, 1, TopicReplication::Fixed(1)));
        }
        let options = AdminOptions::new().operation_timeout(Some(SET_UP));
        let results = self
            .admin()?
            .create_topics(&topics, &options)
            .await
            .map_err(|error| plumbing("creating the topic", error))?;
        for result in results {
            match result {
                // A second listener of the run prepares the topic again, for its dead-letter topic.
                Err((name, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists))
                    if name == names.destination => {}
                other => {
                    other.map_err(|(name, code)| plumbing(&format!("creating topic {name}"), code))?;
                }
            }
        }
        Ok(())
    }

    fn sender(&self) -> Result<Arc<dyn Sender>> {
        Ok(Arc::new(KafkaSender::new(self.sender_config())?))
    }

    async fn listen(&self, names: &Names, event_types: &[&str], handler: EventHandler) -> Result<Listening> {
        // A fresh group starts at the earliest offset, so nothing published before it joined is missed.
        let listener =
            on_each(KafkaListener::builder(self.listener_config(names)), event_types, &handler).build()?;
        Ok(Listening::spawn(|shutdown| async move { listener.run(shutdown).await }))
    }

    async fn listen_once<W: Clone + Send + Sync + 'static>(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: oncebox::Inbox<W>,
        effect: EventNote,
        duplicate: EventNote,
    ) -> Result<Listening> {
        let listener =
            once_each(KafkaListener::builder(self.listener_config(names)), event_types, &inbox, &effect)
                .build()?;
        note_duplicates(listener.outcomes(), duplicate);
        Ok(Listening::spawn(|shutdown| async move { listener.run(shutdown).await }))
    }

    async fn listen_store(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: &oncebox::stored::StoredInbox,
        duplicate: EventNote,
    ) -> Result<Listening> {
        let listener =
            store_each(KafkaListener::builder(self.listener_config(names)), event_types, inbox).build()?;
        note_duplicates(listener.outcomes(), duplicate);
        Ok(Listening::spawn(|shutdown| async move { listener.run(shutdown).await }))
    }

    async fn dispose_listener(&self, names: &Names) -> Result<()> {
        let Some(dead_letter) = names.dead_letter.as_deref() else { return Ok(()) };
        let options = AdminOptions::new().operation_timeout(Some(SET_UP));
        let results = self
            .admin()?
            .delete_topics(&[dead_letter], &options)
            .await
            .map_err(|error| plumbing("deleting the dead-letter topic", error))?;
        for result in results {
            result.map_err(|(name, code)| plumbing(&format!("deleting topic {name}"), code))?;
        }
        Ok(())
    }

    async fn describe(&self, names: &Names, lost: &[Uuid]) -> String {
        let (bootstrap, group, topic) =
            (self.bootstrap.clone(), names.consumer.clone(), names.destination.clone());
        let lost = lost.to_vec();
        let read = tokio::task::spawn_blocking(move || {
            let positions = kafka_positions(&bootstrap, &group, &topic)?;
            let found = find_in_topic(&bootstrap, &topic, &lost)?;
            Ok::<_, oncebox::Error>(format!("{positions} {found}"))
        })
        .await;
        match read {
            Ok(Ok(text)) => text,
            Ok(Err(error)) => format!("the Kafka positions could not be read: {error}"),
            Err(error) => format!("the Kafka positions could not be read: {error}"),
        }
    }

    async fn await_listener(&self, _names: &Names) -> Result<()> {
        // The topic exists from `prepare`, and a new group starts at the earliest offset.
        Ok(())
    }

    async fn republish(&self, messages: &[OutboundMessage]) -> Result<()> {
        let sender = KafkaSender::new(self.sender_config())?;
        sender.adopt_emergency_timeout(EMERGENCY_TIMEOUT)?;
        all_acknowledged(sender.send(messages, Deadline::after(EMERGENCY_TIMEOUT)).await)?;
        sender.flush(EMERGENCY_TIMEOUT).await
    }

    async fn dead_lettered(&self, names: &Names) -> Result<Vec<Uuid>> {
        let Some(topic) = names.dead_letter.clone() else { return Ok(Vec::new()) };
        let bootstrap = self.bootstrap.clone();
        tokio::task::spawn_blocking(move || ids_in_topic(&bootstrap, &topic, 1))
            .await
            .map_err(|error| plumbing("reading the dead-letter topic", error))?
    }

    async fn dispose(&self, names: &Names) -> Result<()> {
        let options = AdminOptions::new().operation_timeout(Some(SET_UP));
        let mut topics = vec![names.destination.as_str()];
        topics.extend(names.dead_letter.as_deref());
        let results = self
            .admin()?
            .delete_topics(&topics, &options)
            .await
            .map_err(|error| plumbing("deleting the topic", error))?;
        for result in results {
            result.map_err(|(name, code)| plumbing(&format!("deleting topic {name}"), code))?;
        }
        Ok(())
    }
}

/// RabbitMQ at `ONCEBOX_AMQP_URL`; each run has its own exchange and queue, declared and bound by
/// the listener.
pub struct RabbitTransport {
    url: String,
}

impl RabbitTransport {
    /// The listener configuration of `names`: its queue declared and bound to the run's exchange
    /// (with the dead-letter exchange and queue when the run has one), quick retries, a message
    /// given up after [`MAX_ATTEMPTS`] failed runs when it has somewhere to go.
    fn listener_config(url: &str, names: &Names) -> RabbitListenerConfig {
        let topology = match &names.dead_letter {
            Some(dead_letter) => {
                RabbitTopology::new(&names.destination).with_dead_letter(dead_letter, dead_letter)
            }
            None => RabbitTopology::new(&names.destination),
        };
        RabbitListenerConfig::new(url, &names.consumer)
            .with_declare(topology)
            .with_max_attempts(MAX_ATTEMPTS)
            .with_retry_backoff(RETRY_MIN, RETRY_MAX)
    }

    async fn connection(&self) -> Result<Connection> {
        Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|error| plumbing("test connection to RabbitMQ", error))
    }

    /// Waits until `queue` exists: a passive declare on a fresh channel each time, because a failed
    /// one closes its channel.
    pub async fn await_queue(&self, queue: &str) -> Result<()> {
        let name = ShortString::try_new(queue).map_err(|error| plumbing("queue name", error))?;
        let deadline = tokio::time::Instant::now() + SET_UP;
        let mut connection: Option<Connection> = None;
        loop {
            // The broker may be down for a moment (its application stopped by the chaos ledger), so
            // a refused connection or a closed one is tried again like a missing queue.
            if connection.as_ref().is_none_or(|open| !open.status().connected()) {
                connection = self.connection().await.ok();
            }
            if let Some(open) = &connection
                && let Ok(channel) = open.create_channel().await
            {
                let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
                if channel.queue_declare(name.clone(), passive, FieldTable::default()).await.is_ok() {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(plumbing(
                    "waiting for the listener",
                    format!("{queue} was not declared within {SET_UP:?} (or RabbitMQ was unreachable)"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Transport for RabbitTransport {
    const NAME: &'static str = "rabbit";
    const VARIABLE: &'static str = "ONCEBOX_AMQP_URL";
    /// RabbitMQ closes a connection after two heartbeat intervals without a frame, and gives its
    /// unacknowledged messages to other consumers.
    const SILENT_CONSUMER_NOTICED_AFTER: Duration = Duration::from_secs(CONSUMER_HEARTBEAT_SECS * 2);

    fn consumer_variables(variable: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, String)> {
        variable(Self::VARIABLE).map_or_else(Vec::new, |url| {
            let separator = if url.contains('?') { '&' } else { '?' };
            vec![(Self::VARIABLE, format!("{url}{separator}heartbeat={CONSUMER_HEARTBEAT_SECS}"))]
        })
    }

    async fn backlog(&self, names: &Names) -> Result<u64> {
        crate::servers::rabbit_queue_messages(&names.consumer).await
    }

    fn from_variables(variable: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        variable(Self::VARIABLE).map(|url| Self { url })
    }

    async fn prepare(&self, _names: &Names) -> Result<()> {
        // The listener declares the exchange, the queue and the binding.
        Ok(())
    }

    fn sender(&self) -> Result<Arc<dyn Sender>> {
        Ok(Arc::new(RabbitSender::new(RabbitSenderConfig::new(&self.url))?))
    }

    async fn listen(&self, names: &Names, event_types: &[&str], handler: EventHandler) -> Result<Listening> {
        // The declared queue is bound to the exchange by every registered event type.
        let listener =
            on_each(RabbitListener::builder(Self::listener_config(&self.url, names)), event_types, &handler)
                .build()?;
        let listening = Listening::spawn(|shutdown| async move { listener.run(shutdown).await });
        // Mandatory publishing reports an event unroutable until the queue is bound.
        self.await_queue(&names.consumer).await?;
        Ok(listening)
    }

    async fn listen_once<W: Clone + Send + Sync + 'static>(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: oncebox::Inbox<W>,
        effect: EventNote,
        duplicate: EventNote,
    ) -> Result<Listening> {
        let builder = RabbitListener::builder(Self::listener_config(&self.url, names));
        let listener = once_each(builder, event_types, &inbox, &effect).build()?;
        note_duplicates(listener.outcomes(), duplicate);
        let listening = Listening::spawn(|shutdown| async move { listener.run(shutdown).await });
        self.await_queue(&names.consumer).await?;
        Ok(listening)
    }

    async fn listen_store(
        &self,
        names: &Names,
        event_types: &[&str],
        inbox: &oncebox::stored::StoredInbox,
        duplicate: EventNote,
    ) -> Result<Listening> {
        let builder = RabbitListener::builder(Self::listener_config(&self.url, names));
        let listener = store_each(builder, event_types, inbox).build()?;
        note_duplicates(listener.outcomes(), duplicate);
        let listening = Listening::spawn(|shutdown| async move { listener.run(shutdown).await });
        self.await_queue(&names.consumer).await?;
        Ok(listening)
    }

    async fn dispose_listener(&self, names: &Names) -> Result<()> {
        let connection = self.connection().await?;
        let channel = connection.create_channel().await.map_err(|error| plumbing("test channel", error))?;
        let mut queues = vec![names.consumer.as_str()];
        queues.extend(names.dead_letter.as_deref());
        for queue in queues {
            let name = ShortString::try_new(queue).map_err(|error| plumbing("queue name", error))?;
            channel
                .queue_delete(name, QueueDeleteOptions::default())
                .await
                .map_err(|error| plumbing("deleting a queue", error))?;
        }
        if let Some(dead_letter) = &names.dead_letter {
            let name = ShortString::try_new(dead_letter.as_str())
                .map_err(|error| plumbing("exchange name", error))?;
            channel
                .exchange_delete(name, ExchangeDeleteOptions::default())
                .await
                .map_err(|error| plumbing("deleting the dead-letter exchange", error))?;
        }
        Ok(())
    }

    async fn describe(&self, names: &Names, _lost: &[Uuid]) -> String {
        // The lost events are not searched: reading a queue's messages would consume them.
        let described = async {
            let connection = self.connection().await?;
            let channel =
                connection.create_channel().await.map_err(|error| plumbing("test channel", error))?;
            let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
            let name = ShortString::try_new(names.consumer.as_str())
                .map_err(|error| plumbing("queue name", error))?;
            let queue = channel
                .queue_declare(name, passive, FieldTable::default())
                .await
                .map_err(|error| plumbing("declaring the queue passively", error))?;
            Ok::<_, oncebox::Error>(format!(
                "queue {}: {} messages ready, {} consumers",
                names.consumer,
                queue.message_count(),
                queue.consumer_count()
            ))
        };
        described.await.unwrap_or_else(|error| format!("the queue could not be read: {error}"))
    }

    async fn await_listener(&self, names: &Names) -> Result<()> {
        // Mandatory publishing reports an event unroutable until the queue is bound.
        self.await_queue(&names.consumer).await
    }

    async fn republish(&self, messages: &[OutboundMessage]) -> Result<()> {
        let sender = RabbitSender::new(RabbitSenderConfig::new(&self.url))?;
        let sent = all_acknowledged(sender.send(messages, Deadline::after(EMERGENCY_TIMEOUT)).await);
        sender.close().await?;
        sent
    }

    async fn dispose(&self, names: &Names) -> Result<()> {
        let connection = self.connection().await?;
        let channel = connection.create_channel().await.map_err(|error| plumbing("test channel", error))?;
        let queue =
            ShortString::try_new(names.consumer.as_str()).map_err(|error| plumbing("queue name", error))?;
        channel
            .queue_delete(queue, QueueDeleteOptions::default())
            .await
            .map_err(|error| plumbing("deleting the queue", error))?;
        let exchange = ShortString::try_new(names.destination.as_str())
            .map_err(|error| plumbing("exchange name", error))?;
        channel
            .exchange_delete(exchange, ExchangeDeleteOptions::default())
            .await
            .map_err(|error| plumbing("deleting the exchange", error))?;
        if let Some(dead_letter) = &names.dead_letter {
            let name =
                ShortString::try_new(dead_letter.as_str()).map_err(|error| plumbing("queue name", error))?;
            channel
                .queue_delete(name.clone(), QueueDeleteOptions::default())
                .await
                .map_err(|error| plumbing("deleting the dead-letter queue", error))?;
            channel
                .exchange_delete(name, ExchangeDeleteOptions::default())
                .await
                .map_err(|error| plumbing("deleting the dead-letter exchange", error))?;
        }
        Ok(())
    }

    async fn dead_lettered(&self, names: &Names) -> Result<Vec<Uuid>> {
        let Some(dead_letter) = &names.dead_letter else { return Ok(Vec::new()) };
        let queue =
            ShortString::try_new(dead_letter.as_str()).map_err(|error| plumbing("queue name", error))?;
        let connection = self.connection().await?;
        let channel = connection.create_channel().await.map_err(|error| plumbing("test channel", error))?;
        let mut ids = Vec::new();
        // Taken off the queue (`no_ack`): the harness keeps what it has read.
        while let Some(message) = channel
            .basic_get(queue.clone(), BasicGetOptions { no_ack: true })
            .await
            .map_err(|error| plumbing("reading the dead-letter queue", error))?
        {
            let event = oncebox::rabbit::decode_delivery(&message.delivery)
                .map_err(|error| plumbing("a dead-lettered message", error))?;
            ids.push(event.id);
        }
        Ok(ids)
    }
}

/// Per partition of `topic`: the offset `group` committed and the high watermark.
fn kafka_positions(bootstrap: &str, group: &str, topic: &str) -> Result<String> {
    use rdkafka::consumer::Consumer;
    let consumer = reader(bootstrap, Some(group))?;
    let mut text = format!("topic {topic}, group {group}:");
    for PartitionPosition { partition, committed: offset, low, high } in
        partition_positions(&consumer, topic)?
    {
        text.push_str(&format!(" partition {partition}: committed {offset:?}, watermarks {low}..{high}"));
        if let Some(rdkafka::Offset::Offset(next)) = offset
            && next < high
        {
            text.push_str(&format!(", {}", probe_fetch(bootstrap, topic, partition, next)));
        }
        text.push(';');
    }
    match consumer.fetch_group_list(Some(group), SET_UP) {
        Ok(groups) => {
            for described in groups.groups() {
                let members: Vec<String> = described
                    .members()
                    .iter()
                    .map(|member| {
                        format!(
                            "{} ({} assignment bytes)",
                            member.id(),
                            member.assignment().map_or(0, <[u8]>::len)
                        )
                    })
                    .collect();
                text.push_str(&format!(" group state {}, members {members:?};", described.state()));
            }
        }
        Err(error) => text.push_str(&format!(" the group could not be described: {error};")),
    }
    Ok(text)
}

/// The lag of `group` on `topic`: per partition the high watermark minus the committed offset (the
/// whole partition where nothing is committed), summed.
fn kafka_lag(bootstrap: &str, group: &str, topic: &str) -> Result<u64> {
    let positions = partition_positions(&reader(bootstrap, Some(group))?, topic)?;
    Ok(positions
        .iter()
        .map(|position| {
            let next = match position.committed {
                Some(rdkafka::Offset::Offset(next)) => next,
                _ => position.low,
            };
            u64::try_from(position.high - next).unwrap_or(0)
        })
        .sum())
}

/// Where a consumer group stands on one partition.
struct PartitionPosition {
    partition: i32,
    /// The group's committed offset, when it has one.
    committed: Option<rdkafka::Offset>,
    /// The low watermark.
    low: i64,
    /// The high watermark: the offset the next record gets.
    high: i64,
}

/// Per partition of `topic`: the committed offset of `consumer`'s group and the watermarks.
fn partition_positions(
    consumer: &rdkafka::consumer::BaseConsumer,
    topic: &str,
) -> Result<Vec<PartitionPosition>> {
    use rdkafka::consumer::Consumer;
    let mut list = rdkafka::TopicPartitionList::new();
    for partition in 0..TOPIC_PARTITIONS {
        list.add_partition(topic, partition);
    }
    let committed = consumer
        .committed_offsets(list, SET_UP)
        .map_err(|error| plumbing("reading the committed offsets", error))?;
    let mut positions = Vec::new();
    for partition in 0..TOPIC_PARTITIONS {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, SET_UP)
            .map_err(|error| plumbing("reading the watermarks", error))?;
        let committed = committed.find_partition(topic, partition).map(|element| element.offset());
        positions.push(PartitionPosition { partition, committed, low, high });
    }
    Ok(positions)
}

/// A Kafka consumer of a stalled run's diagnostics that commits nothing: in `group` to read its
/// offsets, or in a fresh group of its own to read records without disturbing the run's.
fn reader(bootstrap: &str, group: Option<&str>) -> Result<rdkafka::consumer::BaseConsumer> {
    let group = group.map_or_else(|| format!("oncebox_diagnosis_{}", Uuid::now_v7().simple()), str::to_owned);
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| plumbing("Kafka diagnostics consumer", error))
}

/// Where the events `lost` are in `topic`: reads every partition from its start to its high
/// watermark with a consumer outside any group and names the partition and offset of each copy,
/// to tell an event the broker never stored from one the group skipped.
fn find_in_topic(bootstrap: &str, topic: &str, lost: &[Uuid]) -> Result<String> {
    use rdkafka::consumer::Consumer;
    if lost.is_empty() {
        return Ok(String::new());
    }
    let wanted: std::collections::HashSet<Uuid> = lost.iter().copied().collect();
    let consumer = reader(bootstrap, None)?;
    let mut list = rdkafka::TopicPartitionList::new();
    let mut remaining = 0;
    for partition in 0..TOPIC_PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, SET_UP)
            .map_err(|error| plumbing("reading the watermarks", error))?;
        remaining += high;
        list.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .map_err(|error| plumbing("the scan's partition list", error))?;
    }
    consumer.assign(&list).map_err(|error| plumbing("assigning the scan", error))?;
    let (mut read, mut found) = (0_i64, Vec::new());
    let deadline = std::time::Instant::now() + SET_UP;
    while read < remaining && std::time::Instant::now() < deadline {
        let Some(Ok(record)) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        read += 1;
        if let Ok(event) = oncebox::kafka::decode_record(&record.detach())
            && wanted.contains(&event.id)
        {
            found.push(format!("{} at {}@{}", event.id, event.source.partition, event.source.offset));
        }
    }
    Ok(format!(
        "scanned {read} of {remaining} records for the {} lost events: {}",
        lost.len(),
        if found.is_empty() { "NONE is in the topic".to_owned() } else { found.join(", ") }
    ))
}

/// The event ids of every record of `topic` (its `partitions` read from the start to their high
/// watermarks) by a consumer outside any group.
fn ids_in_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<Vec<Uuid>> {
    use rdkafka::consumer::Consumer;
    let consumer = reader(bootstrap, None)?;
    let mut list = rdkafka::TopicPartitionList::new();
    let mut remaining = 0;
    for partition in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, SET_UP)
            .map_err(|error| plumbing("reading the watermarks", error))?;
        remaining += high - low;
        list.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .map_err(|error| plumbing("the read's partition list", error))?;
    }
    if remaining == 0 {
        return Ok(Vec::new());
    }
    consumer.assign(&list).map_err(|error| plumbing("assigning the read", error))?;
    let (mut read, mut ids) = (0_i64, Vec::new());
    let deadline = std::time::Instant::now() + SET_UP;
    while read < remaining {
        if std::time::Instant::now() >= deadline {
            return Err(plumbing(
                &format!("reading topic {topic}"),
                format!("{read} of {remaining} records within {SET_UP:?}"),
            ));
        }
        let Some(polled) = consumer.poll(Duration::from_millis(500)) else { continue };
        let record = polled.map_err(|error| plumbing(&format!("reading topic {topic}"), error))?;
        read += 1;
        let event = oncebox::kafka::decode_record(&record.detach())
            .map_err(|error| plumbing("a dead-lettered record", error))?;
        ids.push(event.id);
    }
    Ok(ids)
}

/// Whether the broker serves a fetch of `topic`/`partition` from offset `from`: a consumer outside
/// any group asks for it and reports the first record it gets, to tell a partition the group no
/// longer fetches from one the broker does not serve from there.
fn probe_fetch(bootstrap: &str, topic: &str, partition: i32, from: i64) -> String {
    use rdkafka::consumer::Consumer;
    use rdkafka::message::Message;
    let consumer = match reader(bootstrap, None) {
        Ok(consumer) => consumer,
        Err(error) => return format!("no probe consumer: {error}"),
    };
    let mut list = rdkafka::TopicPartitionList::new();
    if list.add_partition_offset(topic, partition, rdkafka::Offset::Offset(from)).is_err()
        || consumer.assign(&list).is_err()
    {
        return "the probe could not be assigned".to_owned();
    }
    let deadline = std::time::Instant::now() + PROBE_FETCH;
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(record)) => {
                return format!("a fetch from {from} returns offset {} first", record.offset());
            }
            Some(Err(error)) => return format!("a fetch from {from} fails: {error}"),
            None => {}
        }
    }
    format!("a fetch from {from} returned NOTHING within {PROBE_FETCH:?}")
}
