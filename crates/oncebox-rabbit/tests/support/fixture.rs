//! A running listener over a fresh queue with dead-lettering and a SQLite inbox, for the listener
//! and restart test binaries.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicPublishOptions, ExchangeDeleteOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use oncebox_core::{Dialect, Error, ErrorKind, Inbox, OutboundMessage, SchemaPlan, Sender};
use oncebox_rabbit::{
    ListenerOutcome, RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig, RabbitTopology,
};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::runner::{Failed, TestResult, fail};
use oncebox_testkit::sender_suite::test_message;
use serde::Deserialize;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use crate::support::{fresh_name, raw_channel};

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
    pub database: std::path::PathBuf,
    pub inbox: Inbox<()>,
    _connection: Connection,
    pub channel: Channel,
    pub outcomes: broadcast::Receiver<ListenerOutcome>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<oncebox_core::Result<()>>>,
    cleaned: bool,
}

/// What an effect does: count, and fail the first `fail_first` calls.
#[derive(Default)]
pub struct Effect {
    pub calls: AtomicUsize,
    pub fail_first: usize,
}

impl Fixture {
    pub async fn start(
        harness: &ListenerHarness,
        effect: Arc<Effect>,
        max_deliveries: u32,
    ) -> oncebox_core::Result<Self> {
        let queue = fresh_name("queue");
        let database = std::env::temp_dir().join(format!("{queue}.db"));
        let dialect = SqliteDialect::connect(&database.to_string_lossy()).await?;
        dialect.create_schema(SchemaPlan { outbox: false, dlq: false, inbox: true, jobs: false }).await?;
        let inbox: Inbox<()> = Inbox::new("billing", dialect.inbox_dao(), ());
        let exchange = fresh_name("exchange");
        let dead_letter_exchange = fresh_name("dlx");
        let dead_letter_queue = fresh_name("dlq");
        let config = RabbitListenerConfig::new(harness.url.clone(), queue.clone())
            .with_max_deliveries(max_deliveries)
            .with_declare(
                RabbitTopology::new(exchange.clone())
                    .with_dead_letter(dead_letter_exchange.clone(), dead_letter_queue.clone()),
            );
        let listener = RabbitListener::builder(config)
            .on_once(EVENT_TYPE, inbox.clone(), move |event: oncebox_rabbit::RabbitEvent<OrderCreated>| {
                let effect = effect.clone();
                async move {
                    let call = effect.calls.fetch_add(1, Ordering::SeqCst);
                    if call < effect.fail_first {
                        return Err(Error::temporary(
                            ErrorKind::Other,
                            format!("effect for order {} failed on purpose", event.payload.index),
                        ));
                    }
                    Ok(())
                }
            })
            .build()?;
        let outcomes = listener.outcomes();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            listener
                .run(async move {
                    let _ = stopped.await;
                })
                .await
        });
        let (connection, channel) = raw_channel(&harness.url).await?;
        Ok(Self {
            url: harness.url.clone(),
            exchange,
            queue,
            dead_letter_exchange,
            dead_letter_queue,
            database,
            inbox,
            _connection: connection,
            channel,
            outcomes,
            stop: Some(stop),
            task: Some(task),
            cleaned: false,
        })
    }

    pub fn sender(&self) -> oncebox_core::Result<RabbitSender> {
        RabbitSender::new(
            RabbitSenderConfig::new(self.url.clone()).with_emergency_timeout(Duration::from_secs(10)),
        )
    }

    /// Sends `message`, retrying while the listener has not declared and bound its queue yet
    /// (until then the mandatory publish comes back unroutable).
    pub async fn deliver(&self, sender: &RabbitSender, message: &OutboundMessage) -> TestResult {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match sender.send(std::slice::from_ref(message)).await.pop() {
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
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let got = self
                .channel
                .basic_get(
                    ShortString::try_new(self.dead_letter_queue.as_str()).map_err(fail)?,
                    BasicGetOptions { no_ack: true },
                )
                .await
                .map_err(fail)?;
            if got.is_some() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the listener and deletes the broker objects and the database.
    pub async fn finish(mut self) -> TestResult {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.map_err(fail)?.map_err(fail)?;
        }
        self.cleaned = true;
        self.names().remove().await
    }

    fn names(&self) -> Leftovers {
        Leftovers {
            url: self.url.clone(),
            queues: vec![self.queue.clone(), self.dead_letter_queue.clone()],
            exchanges: vec![self.exchange.clone(), self.dead_letter_exchange.clone()],
            database: self.database.clone(),
        }
    }
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
        if let Some(task) = self.task.take() {
            task.abort();
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

/// A message of the fixture's event type to `exchange`.
pub fn message_for(exchange: &str, index: usize) -> OutboundMessage {
    let mut message = test_message(exchange, index);
    message.event_type = EVENT_TYPE.to_owned();
    message
}
