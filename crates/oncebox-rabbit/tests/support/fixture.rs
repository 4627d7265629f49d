//! A running listener over a fresh queue (with dead-lettering, or a plain queue declared by the test
//! itself) and a SQLite inbox, for the listener and restart test binaries.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicRejectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use oncebox_core::config::Backoff;
use oncebox_core::stored::{StoredEvent, StoredInbox, StoredInboxSettings, StoredProcessing};
use oncebox_core::{Deadline, Dialect, Error, ErrorKind, Inbox, OutboundMessage, SchemaPlan, Sender};
use oncebox_rabbit::{
    ListenerOutcome, RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig, RabbitTopology,
};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::Background;
use oncebox_testkit::runner::{Failed, TestResult, fail};
use oncebox_testkit::sender_suite::test_message;
use serde::Deserialize;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;

use crate::support::{fresh_name, header_text, plumbing, raw_channel};

pub const EVENT_TYPE: &str = "order-created";
pub const WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Deserialize)]
pub struct OrderCreated {
    pub index: u32,
}

pub struct ListenerHarness {
    pub url: String,
}

/// A queue, its exchange and dead-letter pair, an inbox database, and a running listener.
pub struct Fixture {
    pub url: String,
    pub exchange: String,
    pub queue: String,
    pub dead_letter_exchange: String,
    pub dead_letter_queue: String,
    /// Whether the queue dead-letters; without it the dead-letter names are never declared.
    pub dead_lettering: bool,
    pub database: std::path::PathBuf,
    /// The inbox database, which also holds the `effects` table of a transactional listener.
    pub dialect: SqliteDialect,
    pub inbox: Inbox<()>,
    /// The durable inbox and its running processor, with `durable`.
    pub stored: Option<(StoredInbox, StoredProcessing)>,
    _connection: Connection,
    pub channel: Channel,
    pub outcomes: broadcast::Receiver<ListenerOutcome>,
    running: Option<Background<oncebox_core::Result<()>>>,
    /// The listener, until it is started (see [`Setup::start_listener`]).
    listener: Option<RabbitListener>,
    cleaned: bool,
}

/// What an effect does: count, remember when it was called, and fail the first `fail_first` calls.
#[derive(Default)]
pub struct Effect {
    pub calls: AtomicUsize,
    /// Calls that succeeded: the effect really happened.
    pub applied: AtomicUsize,
    pub fail_first: usize,
    pub called_at: Mutex<Vec<Instant>>,
    /// The first call waits for [`Effect::release`] before it goes on.
    pub hold_first_call: bool,
    /// Notified when a held first call has started.
    pub entered: Notify,
    /// Lets a held first call go on.
    pub release: Notify,
}

impl Effect {
    /// An effect whose first `calls` calls fail.
    pub fn failing_first(calls: usize) -> Self {
        Self { fail_first: calls, ..Self::default() }
    }

    /// An effect whose first call waits for [`Effect::release`], then succeeds.
    pub fn holding_first_call() -> Self {
        Self { hold_first_call: true, ..Self::default() }
    }

    /// The instants of every call so far, in order.
    pub fn call_instants(&self) -> Vec<Instant> {
        self.called_at.lock().map(|instants| instants.clone()).unwrap_or_default()
    }
}

/// How the fixture's queue and listener are set up.
pub struct Setup {
    /// `with_max_attempts`, when not the default.
    pub max_attempts: Option<u32>,
    /// `with_retry_backoff`, when not the default.
    pub retry_backoff: Option<(Duration, Duration)>,
    /// The listener declares the topology with a dead-letter exchange and queue. Without it the
    /// fixture declares a plain queue itself and the listener runs with its default settings.
    pub dead_letter: bool,
    /// The fixture declares a quorum queue (which counts deliveries in `x-delivery-count`) with a
    /// dead-letter exchange and queue, and tells the listener the queue has one.
    pub quorum_dead_lettered: bool,
    /// `with_connection_name`, so a test can close the listener's connection alone.
    pub connection_name: Option<String>,
    /// Start the listener at once; otherwise [`Fixture::start_listener`] does.
    pub start_listener: bool,
    /// The listener registers a transactional handler (`on_in`) that writes a row of the
    /// `effects` table in the inbox's transaction, instead of an `on_once` effect.
    pub transactional: bool,
    /// The listener stores every message in a durable inbox (`store_in`), and a processor applies
    /// it with a transactional handler writing a row of the `effects` table.
    pub durable: bool,
    /// `with_concurrency`, when not the default (1).
    pub concurrency: Option<u16>,
}

impl Setup {
    /// The listener declares a dead-lettering topology and gives up after `max_attempts`.
    pub fn dead_lettered(max_attempts: u32) -> Self {
        Self { max_attempts: Some(max_attempts), dead_letter: true, ..Self::plain_queue() }
    }

    /// A plain queue without a dead-letter exchange, consumed with the listener's defaults.
    pub fn plain_queue() -> Self {
        Self {
            max_attempts: None,
            retry_backoff: None,
            dead_letter: false,
            quorum_dead_lettered: false,
            connection_name: None,
            start_listener: true,
            transactional: false,
            durable: false,
            concurrency: None,
        }
    }
}

impl Fixture {
    pub async fn start(
        harness: &ListenerHarness,
        effect: Arc<Effect>,
        max_attempts: u32,
    ) -> oncebox_core::Result<Self> {
        Self::start_with(harness, effect, Setup::dead_lettered(max_attempts)).await
    }

    pub async fn start_with(
        harness: &ListenerHarness,
        effect: Arc<Effect>,
        setup: Setup,
    ) -> oncebox_core::Result<Self> {
        let queue = fresh_name("queue");
        let database = std::env::temp_dir().join(format!("{queue}.db"));
        let dialect = SqliteDialect::connect(&database.to_string_lossy()).await?;
        dialect.create_schema(SchemaPlan { outbox: false, dlq: false, inbox: true, jobs: false }).await?;
        let inbox: Inbox<()> = Inbox::new("billing", dialect.inbox_dao(), ());
        let exchange = fresh_name("exchange");
        let dead_letter_exchange = fresh_name("dlx");
        let dead_letter_queue = fresh_name("dlq");
        let (connection, channel) = raw_channel(&harness.url).await?;
        let mut config = RabbitListenerConfig::new(harness.url.clone(), queue.clone());
        if let Some(max_attempts) = setup.max_attempts {
            config = config.with_max_attempts(max_attempts);
        }
        if let Some((min, max)) = setup.retry_backoff {
            config = config.with_retry_backoff(min, max);
        }
        if let Some(concurrency) = setup.concurrency {
            config = config.with_concurrency(concurrency);
        }
        if let Some(name) = &setup.connection_name {
            config = config.with_connection_name(name.clone());
        }
        if setup.dead_letter {
            config = config.with_declare(
                RabbitTopology::new(exchange.clone())
                    .with_dead_letter(dead_letter_exchange.clone(), dead_letter_queue.clone()),
            );
        } else if setup.quorum_dead_lettered {
            declare_quorum_queue(&channel, &exchange, &queue, &dead_letter_exchange, &dead_letter_queue)
                .await?;
            config = config.with_queue_dead_letter_exchange();
        } else {
            declare_plain_queue(&channel, &exchange, &queue, FieldTable::default()).await?;
        }
        if setup.transactional || setup.durable {
            oncebox_sqlite::sqlx::query(
                "CREATE TABLE effects (event_id TEXT PRIMARY KEY, idx INTEGER NOT NULL)",
            )
            .execute(dialect.pool())
            .await
            .map_err(|error| plumbing("creating the effects table", error))?;
        }
        let mut stored = None;
        let listener = if setup.durable {
            let inbox = StoredInbox::new("billing", dialect.stored_inbox_dao()).with_settings(
                StoredInboxSettings {
                    poll_interval: Duration::from_millis(50),
                    backoff: Backoff {
                        enabled: true,
                        delay: Duration::from_millis(50),
                        multiplier: 2.0,
                        max_delay: Duration::from_millis(200),
                        jitter: 0.0,
                    },
                    ..StoredInboxSettings::default()
                },
            )?;
            let processing = inbox
                .processor()
                .on_in(EVENT_TYPE, dialect.clone(), move |tx, event: StoredEvent<OrderCreated>| {
                    let effect = effect.clone();
                    Box::pin(async move { write_effect(tx, event.id, event.payload.index, &effect).await })
                })
                .start()?;
            let listener = RabbitListener::builder(config).store_in([EVENT_TYPE], &inbox).build()?;
            stored = Some((inbox, processing));
            listener
        } else if setup.transactional {
            transactional_listener(config, &dialect, effect)?
        } else {
            effect_listener(config, &inbox, effect)?
        };
        let outcomes = listener.outcomes();
        let mut fixture = Self {
            url: harness.url.clone(),
            exchange,
            queue,
            dead_letter_exchange,
            dead_letter_queue,
            dead_lettering: setup.dead_letter || setup.quorum_dead_lettered,
            database,
            dialect,
            inbox,
            stored,
            _connection: connection,
            channel,
            outcomes,
            running: None,
            listener: Some(listener),
            cleaned: false,
        };
        if setup.start_listener {
            fixture.start_listener();
        }
        Ok(fixture)
    }

    /// Starts a second listener on the fixture's queue, with the same inbox and `effect`, its
    /// connection named `connection_name`, retrying after `retry_backoff`; returns it running and
    /// its outcomes.
    pub fn start_another_listener(
        &self,
        effect: Arc<Effect>,
        connection_name: &str,
        retry_backoff: Duration,
    ) -> oncebox_core::Result<(Background<oncebox_core::Result<()>>, broadcast::Receiver<ListenerOutcome>)>
    {
        let config = RabbitListenerConfig::new(self.url.clone(), self.queue.clone())
            .with_connection_name(connection_name.to_owned())
            .with_retry_backoff(retry_backoff, retry_backoff);
        let listener = effect_listener(config, &self.inbox, effect)?;
        let outcomes = listener.outcomes();
        Ok((Background::spawn(|shutdown| async move { listener.run(shutdown).await }), outcomes))
    }

    /// How many consumers the fixture's queue has.
    pub async fn consumers(&self) -> Result<u32, Failed> {
        let queue = self
            .channel
            .queue_declare(
                ShortString::try_new(self.queue.as_str()).map_err(fail)?,
                QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() },
                FieldTable::default(),
            )
            .await
            .map_err(fail)?;
        Ok(queue.consumer_count())
    }

    /// Starts the listener built by `start_with` (once).
    pub fn start_listener(&mut self) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        self.running = Some(Background::spawn(|shutdown| async move { listener.run(shutdown).await }));
    }

    /// Takes the fixture's message from its queue and returns it with `basic.reject` + requeue,
    /// `times` times, as a consumer whose channel closes would; returns the broker's
    /// `x-delivery-count` of the last copy taken.
    pub async fn return_to_queue(&self, times: usize) -> Result<Option<u64>, Failed> {
        let mut count = None;
        for _ in 0..times {
            let deadline = tokio::time::Instant::now() + WAIT;
            let got = loop {
                let got = self
                    .channel
                    .basic_get(
                        ShortString::try_new(self.queue.as_str()).map_err(fail)?,
                        BasicGetOptions { no_ack: false },
                    )
                    .await
                    .map_err(fail)?;
                match got {
                    Some(got) => break got,
                    None if tokio::time::Instant::now() >= deadline => {
                        return Err(fail("the message never came back to the queue"));
                    }
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            };
            count = got
                .delivery
                .properties
                .headers()
                .as_ref()
                .and_then(|table| table.inner().get("x-delivery-count").cloned())
                .and_then(|value| match value {
                    AMQPValue::LongLongInt(number) => u64::try_from(number).ok(),
                    AMQPValue::LongInt(number) => u64::try_from(number).ok(),
                    other => header_text(&other).and_then(|text| text.parse().ok()),
                });
            got.delivery.acker.reject(BasicRejectOptions { requeue: true }).await.map_err(fail)?;
        }
        Ok(count)
    }

    pub fn sender(&self) -> oncebox_core::Result<RabbitSender> {
        RabbitSender::new(RabbitSenderConfig::new(self.url.clone()))
    }

    /// Sends `message`, retrying while the listener has not declared and bound its queue yet
    /// (until then the mandatory publish comes back unroutable).
    pub async fn deliver(&self, sender: &RabbitSender, message: &OutboundMessage) -> TestResult {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match sender
                .send(std::slice::from_ref(message), Deadline::after(Duration::from_secs(10)))
                .await
                .pop()
            {
                Some(Ok(())) => return Ok(()),
                Some(Err(error)) if tokio::time::Instant::now() >= deadline => {
                    return Err(fail(format!("could not deliver {}: {error}", message.id)));
                }
                Some(Err(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
                None => return Err(fail("no result for a one-message batch")),
            }
        }
    }

    /// Publishes raw bytes with raw headers, as a foreign producer might.
    pub async fn publish_raw(&self, headers: FieldTable, payload: &[u8]) -> TestResult {
        let confirm = self
            .channel
            .basic_publish(
                ShortString::try_new(self.exchange.as_str()).map_err(fail)?,
                ShortString::from(EVENT_TYPE),
                BasicPublishOptions::default(),
                payload,
                BasicProperties::default().with_headers(headers),
            )
            .await
            .map_err(fail)?;
        confirm.await.map_err(fail)?;
        Ok(())
    }

    pub async fn next_outcome(&mut self) -> Result<ListenerOutcome, Failed> {
        match tokio::time::timeout(WAIT, self.outcomes.recv()).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(error)) => Err(fail(format!("outcome stream: {error}"))),
            Err(_) => Err(fail(format!("no listener outcome within {WAIT:?}"))),
        }
    }

    /// The next message in the dead-letter queue, polled for a bounded time.
    pub async fn dead_lettered(&self) -> Result<Option<lapin::message::BasicGetMessage>, Failed> {
        self.next_in(&self.dead_letter_queue).await
    }

    /// The next message in the fixture's own queue, polled for a bounded time (after the listener
    /// stopped, what it left unacknowledged is back in the queue).
    pub async fn queued(&self) -> Result<Option<lapin::message::BasicGetMessage>, Failed> {
        self.next_in(&self.queue).await
    }

    /// The next message in `queue`, taken without an acknowledgement, polled for a bounded time.
    /// The next message of the fixture's queue, taken off it, without waiting for one.
    pub async fn queued_now(&self) -> Result<Option<lapin::message::BasicGetMessage>, Failed> {
        let queue = ShortString::try_new(self.queue.as_str()).map_err(fail)?;
        self.channel.basic_get(queue, BasicGetOptions { no_ack: true }).await.map_err(fail)
    }

    async fn next_in(&self, queue: &str) -> Result<Option<lapin::message::BasicGetMessage>, Failed> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let got = self
                .channel
                .basic_get(ShortString::try_new(queue).map_err(fail)?, BasicGetOptions { no_ack: true })
                .await
                .map_err(fail)?;
            if got.is_some() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the listener (its unacknowledged messages return to the queue) and waits for it.
    pub async fn stop_listener(&mut self) -> TestResult {
        match self.running.take() {
            Some(running) => running.stop().await?.map_err(fail),
            None => Ok(()),
        }
    }

    /// Stops the listener and deletes the broker objects and the database.
    pub async fn finish(mut self) -> TestResult {
        self.stop_listener().await?;
        if let Some((_, processing)) = self.stored.take() {
            assert!(processing.shutdown(WAIT).await, "the durable inbox's processor did not stop in time");
        }
        self.cleaned = true;
        self.names().remove().await
    }

    fn names(&self) -> Leftovers {
        let mut queues = vec![self.queue.clone()];
        let mut exchanges = vec![self.exchange.clone()];
        if self.dead_lettering {
            queues.push(self.dead_letter_queue.clone());
            exchanges.push(self.dead_letter_exchange.clone());
        }
        Leftovers { url: self.url.clone(), queues, exchanges, database: self.database.clone() }
    }
}

/// A listener that applies `effect` through `inbox` with `on_once`.
fn effect_listener(
    config: RabbitListenerConfig,
    inbox: &Inbox<()>,
    effect: Arc<Effect>,
) -> oncebox_core::Result<RabbitListener> {
    RabbitListener::builder(config)
        .on_once(EVENT_TYPE, inbox.clone(), move |event: oncebox_rabbit::RabbitEvent<OrderCreated>| {
            let effect = effect.clone();
            async move {
                if let Ok(mut instants) = effect.called_at.lock() {
                    instants.push(Instant::now());
                }
                let call = effect.calls.fetch_add(1, Ordering::SeqCst);
                if call == 0 && effect.hold_first_call {
                    effect.entered.notify_one();
                    effect.release.notified().await;
                }
                if call < effect.fail_first {
                    return Err(Error::temporary(
                        ErrorKind::Other,
                        format!("effect for order {} failed on purpose", event.payload.index),
                    ));
                }
                effect.applied.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
}

/// A listener whose transactional handler (`on_in`) writes a row of the `effects` table in the
/// inbox's transaction, failing the first `effect.fail_first` runs after writing it (so that a
/// failed run's row must be rolled back with its inbox record).
fn transactional_listener(
    config: RabbitListenerConfig,
    dialect: &SqliteDialect,
    effect: Arc<Effect>,
) -> oncebox_core::Result<RabbitListener> {
    let inbox = Inbox::new("billing", dialect.inbox_dao(), dialect.writer());
    RabbitListener::builder(config)
        .on_in(
            EVENT_TYPE,
            inbox,
            dialect.clone(),
            move |tx, event: oncebox_rabbit::RabbitEvent<OrderCreated>| {
                let effect = effect.clone();
                Box::pin(async move { write_effect(tx, event.id, event.payload.index, &effect).await })
            },
        )
        .build()
}

/// The effect of the transactional handlers: a row of the `effects` table written in `tx`, then
/// a failure for the first `effect.fail_first` runs (so that a failed run's row must be rolled
/// back with its inbox record or its settle).
async fn write_effect(
    tx: &mut oncebox_sqlite::sqlx::Transaction<'static, oncebox_sqlite::sqlx::Sqlite>,
    id: uuid::Uuid,
    index: u32,
    effect: &Effect,
) -> Result<(), oncebox_core::BoxError> {
    let call = effect.calls.fetch_add(1, Ordering::SeqCst);
    oncebox_sqlite::sqlx::query("INSERT INTO effects (event_id, idx) VALUES (?, ?)")
        .bind(id.to_string())
        .bind(index)
        .execute(&mut **tx)
        .await?;
    if call < effect.fail_first {
        return Err(format!("effect for order {index} failed on purpose").into());
    }
    effect.applied.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// What a fixture leaves behind on the broker and on disk.
struct Leftovers {
    url: String,
    queues: Vec<String>,
    exchanges: Vec<String>,
    database: std::path::PathBuf,
}

impl Leftovers {
    async fn remove(self) -> TestResult {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.database.to_string_lossy()));
        }
        // A fresh channel: the fixture's own may have died with a broker restart.
        let (_connection, channel) = raw_channel(&self.url).await.map_err(fail)?;
        for queue in &self.queues {
            channel
                .queue_delete(
                    ShortString::try_new(queue.as_str()).map_err(fail)?,
                    QueueDeleteOptions::default(),
                )
                .await
                .map_err(fail)?;
        }
        for exchange in &self.exchanges {
            channel
                .exchange_delete(
                    ShortString::try_new(exchange.as_str()).map_err(fail)?,
                    ExchangeDeleteOptions::default(),
                )
                .await
                .map_err(fail)?;
        }
        Ok(())
    }
}

impl Drop for Fixture {
    /// A test that failed before `finish` still removes its durable queues and exchanges; on a
    /// thread of its own because the test's runtime may be unwinding.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        // Otherwise the listener would re-declare the queue once it is deleted.
        if let Some(running) = self.running.take() {
            running.abort();
        }
        let leftovers = self.names();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(fail)?;
            runtime.block_on(leftovers.remove())
        });
        if let Ok(Err(error)) = cleanup.join() {
            eprintln!("could not clean up after a failed test: {error:?}");
        }
    }
}

/// A durable topic exchange and a durable queue without a dead-letter exchange, bound by the
/// fixture's event type: what an application declares itself before a listener with default settings.
async fn declare_plain_queue(
    channel: &Channel,
    exchange: &str,
    queue: &str,
    arguments: FieldTable,
) -> oncebox_core::Result<()> {
    let exchange_name = ShortString::try_new(exchange).map_err(|error| plumbing("exchange name", error))?;
    let queue_name = ShortString::try_new(queue).map_err(|error| plumbing("queue name", error))?;
    channel
        .exchange_declare(
            exchange_name.clone(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("declaring the test exchange", error))?;
    channel
        .queue_declare(
            queue_name.clone(),
            QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() },
            arguments,
        )
        .await
        .map_err(|error| plumbing("declaring the test queue", error))?;
    channel
        .queue_bind(
            queue_name,
            exchange_name,
            ShortString::from(EVENT_TYPE),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("binding the test queue", error))?;
    Ok(())
}

/// A quorum queue dead-lettering to a fanout exchange and its queue, declared by the application.
async fn declare_quorum_queue(
    channel: &Channel,
    exchange: &str,
    queue: &str,
    dead_letter_exchange: &str,
    dead_letter_queue: &str,
) -> oncebox_core::Result<()> {
    let dead_letter_name =
        ShortString::try_new(dead_letter_exchange).map_err(|error| plumbing("exchange name", error))?;
    let dead_letter_queue_name =
        ShortString::try_new(dead_letter_queue).map_err(|error| plumbing("queue name", error))?;
    channel
        .exchange_declare(
            dead_letter_name.clone(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("declaring the dead-letter exchange", error))?;
    channel
        .queue_declare(
            dead_letter_queue_name.clone(),
            QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("declaring the dead-letter queue", error))?;
    channel
        .queue_bind(
            dead_letter_queue_name,
            dead_letter_name,
            ShortString::from(""),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("binding the dead-letter queue", error))?;
    let mut arguments = FieldTable::default();
    arguments.insert(ShortString::from("x-queue-type"), AMQPValue::LongString(LongString::from("quorum")));
    arguments.insert(
        ShortString::from("x-dead-letter-exchange"),
        AMQPValue::LongString(LongString::from(dead_letter_exchange)),
    );
    declare_plain_queue(channel, exchange, queue, arguments).await
}

/// A message of the fixture's event type to `exchange`.
pub fn message_for(exchange: &str, index: usize) -> OutboundMessage {
    let mut message = test_message(exchange, index);
    message.event_type = EVENT_TYPE.to_owned();
    message
}
