//! What the chaos ledger's processes share: the file the `chaos_relay` and `chaos_consumer`
//! binaries start from, the relay and the consumers of each [`Flavour`] themselves (generic over
//! the dialect and the broker the file names), the effect the consumers apply (recording every
//! delivery first), and the stats file a relay keeps up to date so that its counters outlive a
//! SIGKILL.
//!
//! The file holds the library's own `oncebox:` block, validated by oncebox as any service's
//! configuration would be, and a `chaos:` block naming what the run's processes meet on:
//!
//! ```yaml
//! oncebox:
//!   tables: { prefix: c_0123456789ab_ }
//!   outbox:
//!     events:
//!       order-placed: { topic: oncebox_chaos_0123456789ab }
//!       order-paid: { topic: oncebox_chaos_0123456789ab, concurrency: 2 }
//!   inbox: {}
//! chaos:
//!   database: postgres
//!   broker: rabbit
//!   event-types: [order-placed, order-paid]
//!   orders-table: c_0123456789ab_orders
//!   effects-table: c_0123456789ab_effects
//!   deliveries-table: c_0123456789ab_deliveries
//!   listener-group: oncebox_chaos_effects_0123456789ab
//!   inbox-consumer: effects
//!   dead-letter: oncebox_chaos_dead_0123456789ab
//!   handler-failures: { seed: 42, failing-per-mille: 30, poison-per-mille: 1 }
//!   stats-dir: /tmp/oncebox_chaos_0123456789ab
//!   exit-on-stdin-eof: true
//! ```
//!
//! Server addresses come only from the variables of docs/testing.md: `ONCEBOX_PG_URL` or
//! `ONCEBOX_MYSQL_URL` (SQLite needs none: its file is named by the table prefix), and
//! `ONCEBOX_AMQP_URL` or `ONCEBOX_KAFKA_BOOTSTRAP`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oncebox::config::{Backoff, TransportKind};
use oncebox::stored::{StoredEvent, StoredInbox, StoredInboxSettings};
use oncebox::{
    Config, Consumed, Deadline, Dialect, Error, ErrorKind, Lifecycle, Oncebox, OutboundMessage, Result,
    SendError, Sender, StatsSnapshot,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::{StoreInbox, StoreTx};
use crate::transport::EventNote;
use crate::{
    EventHandler, KafkaTransport, MySqlStore, Names, Order, PgStore, RabbitTransport, SqliteStore, Store,
    Transport, plumbing,
};

/// The variable that makes `chaos_consumer` apply effects without the inbox (`1`), so that the
/// ledger can be shown to catch double effects.
pub const BROKEN_VARIABLE: &str = "ONCEBOX_CHAOS_BROKEN";

/// The variable that makes `chaos_relay` mark a share of its events PROCESSED without sending
/// them (`1`; the events [`dropped_by_a_broken_relay`] names), so that the ledger can be shown to
/// catch lost events.
pub const DROP_SENDS_VARIABLE: &str = "ONCEBOX_CHAOS_DROP_SENDS";

/// A broken relay drops one event in this many.
const DROP_ONE_IN: u128 = 8;

/// Whether a relay started with [`DROP_SENDS_VARIABLE`] drops event `id`: decided by the id alone
/// (its random low bits), so that every relay process drops the same events, and the harness
/// knows which ones the ledger must report lost.
pub fn dropped_by_a_broken_relay(id: Uuid) -> bool {
    id.as_u128().is_multiple_of(DROP_ONE_IN)
}

/// How long the deliberately broken consumer waits between its effect and its acknowledgement:
/// the window in which a consumer killed has applied an event the broker will deliver again, which
/// every consumer has, widened so that the consumer kills of a short run meet it.
const BROKEN_ACKNOWLEDGES_AFTER: Duration = Duration::from_millis(50);

/// The outcome noted on a delivery whose handler failed on purpose.
pub const FAILED: &str = "failed";

/// How often a relay replaces its stats file.
const STATS_EVERY: Duration = Duration::from_millis(200);
/// The graceful shutdown deadline after SIGTERM.
const SHUTDOWN: Duration = Duration::from_secs(5);

/// How long a relay or consumer keeps trying to start while its database or broker is away.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `start` until it succeeds, retrying database, broker and timeout errors every 250 ms for at
/// most [`START_PATIENCE`]. A process killed by the harness is restarted at once, and the restart
/// can meet a database restart or a blackholed path; a deployed relay's supervisor would restart
/// it until it comes up, and this is that supervisor. Any other error (bad config) fails at once.
async fn patiently<T, F, Fut>(what: &str, mut start: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    loop {
        match start().await {
            Ok(started) => return Ok(started),
            Err(error)
                if matches!(error.kind(), ErrorKind::Database | ErrorKind::Broker | ErrorKind::Timeout)
                    && tokio::time::Instant::now() < deadline =>
            {
                eprintln!("{what}: starting failed, trying again: {error}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The SQL database of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Database {
    /// PostgreSQL at `ONCEBOX_PG_URL`.
    Postgres,
    /// MySQL or MariaDB at `ONCEBOX_MYSQL_URL`.
    Mysql,
    /// A SQLite file in the temp directory, named by the table prefix.
    Sqlite,
}

impl Database {
    /// Every database, in the order runs and tables list them.
    pub const ALL: [Self; 3] = [Self::Postgres, Self::Mysql, Self::Sqlite];

    /// The name used in pair names and files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => PgStore::NAME,
            Self::Mysql => MySqlStore::NAME,
            Self::Sqlite => SqliteStore::NAME,
        }
    }
}

/// The broker of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Broker {
    /// RabbitMQ at `ONCEBOX_AMQP_URL`.
    Rabbit,
    /// A Kafka-protocol broker at `ONCEBOX_KAFKA_BOOTSTRAP`.
    Kafka,
}

impl Broker {
    /// Every broker, in the order runs and tables list them.
    pub const ALL: [Self; 2] = [Self::Rabbit, Self::Kafka];

    /// The name used in pair names and files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rabbit => RabbitTransport::NAME,
            Self::Kafka => KafkaTransport::NAME,
        }
    }
}

/// How a consumer process uses the inbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavour {
    /// The handler records the id with `Inbox::record_in` in the transaction of its effect: the
    /// effect happens once, whatever crashes.
    #[default]
    Transactional,
    /// The listener's `on_once` registration (`Inbox::consume_once`): the id is claimed under a
    /// lease, the effect runs outside any transaction, then the id is marked applied. A consumer
    /// killed between its effect and the mark leaves a claim that another delivery takes over
    /// once the lease ran out, running the effect again: allowed only for such deliveries.
    Once,
    /// The durable inbox (`oncebox::stored`): the listener only stores each message
    /// (`store_in`) and acknowledges it once its row committed; the inbox's processor claims the
    /// stored rows and runs an `on_in` handler, whose effect commits in the transaction that
    /// settles the row PROCESSED. Retries wait in the row; a poison message ends FAILED there.
    Durable,
}

impl Flavour {
    /// The name used in reports: the inbox call behind it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transactional => "record_in",
            Self::Once => "on_once",
            Self::Durable => "store_in",
        }
    }

    /// The name of the chaos file's `flavour:` value.
    pub fn config_value(self) -> &'static str {
        match self {
            Self::Transactional => "transactional",
            Self::Once => "once",
            Self::Durable => "durable",
        }
    }
}

/// The `on_once` consumers' claim lease: longer than any effect of the run (a few milliseconds),
/// short enough that an event whose consumer was killed mid-effect is taken over soon.
pub const ONCE_LEASE: Duration = Duration::from_secs(3);

/// The durable inbox consumers' claim lease: far longer than a handler run (a few milliseconds,
/// seconds while the database restarts), short enough that the rows a killed or stopped consumer
/// held are run again by the other one within the run.
pub const DURABLE_LEASE: Duration = Duration::from_secs(5);

/// Runs a durable inbox message gets before it is FAILED: far more than a planned failure takes
/// (at most 3), plus a lease run out for each kill or stop that meets it and failed runs while the
/// database restarts, so only poison, which fails every run, reaches it.
pub const DURABLE_MAX_ATTEMPTS: u32 = 20;

/// Handlers running at once per event type in a durable inbox consumer. Each run holds a pooled
/// connection for its transaction (begun by the processor before the handler) and takes a second
/// one to record its delivery, so both event types' runs together must leave the dialects' default
/// pool (10 connections) room for those and for the listener's stores. With the inbox's default
/// (8 per type, 16 in all) every connection is held by a transaction whose handler waits for
/// another: processing stalls in waves of the pool's acquire timeout.
pub const DURABLE_CONCURRENCY: usize = 3;

/// The durable inbox settings of the chaos consumers: a quick poll (50 ms) and short retries
/// (100 ms doubling to 1 s), so that a run's planned failures and its poison (about 16 s to reach
/// [`DURABLE_MAX_ATTEMPTS`]) are done soon after the publishing; the [`DURABLE_LEASE`]; and the
/// default deduplication window (7 days), so no copy of the run is ever refused as too old.
pub fn durable_settings() -> StoredInboxSettings {
    StoredInboxSettings {
        batch_size: 16,
        concurrency: DURABLE_CONCURRENCY,
        poll_interval: Duration::from_millis(50),
        lease: DURABLE_LEASE,
        max_attempts: DURABLE_MAX_ATTEMPTS,
        backoff: Backoff {
            enabled: true,
            delay: Duration::from_millis(100),
            multiplier: 2.0,
            max_delay: Duration::from_secs(1),
            jitter: 0.2,
        },
        ..StoredInboxSettings::default()
    }
}

/// The `chaos:` block of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChaosSettings {
    /// The SQL database of the run.
    pub database: Database,
    /// The broker of the run.
    pub broker: Broker,
    /// The event types of the run (each configured under `oncebox.outbox.events`, all relayed to
    /// one topic or exchange).
    pub event_types: Vec<String>,
    /// The business table the publisher writes.
    pub orders_table: String,
    /// The table of effects: one row per applied event.
    pub effects_table: String,
    /// The table of deliveries: one row per delivery the consumers saw, written before the effect.
    pub deliveries_table: String,
    /// The RabbitMQ queue or Kafka consumer group the consumers share.
    pub listener_group: String,
    /// The inbox consumer name.
    pub inbox_consumer: String,
    /// How the consumers use the inbox (the relay ignores it).
    #[serde(default)]
    pub flavour: Flavour,
    /// Where the listeners dead-letter an event whose handler keeps failing (see
    /// [`Names::dead_letter`]); without it such an event is retried for as long as it fails.
    #[serde(default)]
    pub dead_letter: Option<String>,
    /// Handler failures the consumers make on purpose, decided by each event's id.
    #[serde(default)]
    pub handler_failures: Option<HandlerFailures>,
    /// Where relays keep their stats files.
    pub stats_dir: PathBuf,
    /// Exit (as on SIGTERM) when standard input reaches its end: the harness holds the other end
    /// of a pipe, so its processes go away with it even when it is itself SIGKILLed.
    #[serde(default)]
    pub exit_on_stdin_eof: bool,
}

/// The whole file: the library's configuration and the chaos block.
#[derive(Debug, Clone)]
pub struct ChaosFile {
    /// The validated `oncebox:` block.
    pub oncebox: Config,
    /// The `chaos:` block.
    pub chaos: ChaosSettings,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChaosFile {
    oncebox: serde_norway::Value,
    chaos: ChaosSettings,
}

#[derive(Serialize)]
struct OnceboxBlock<'a> {
    oncebox: &'a serde_norway::Value,
}

impl ChaosFile {
    /// Reads and validates the file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| plumbing(&format!("reading {}", path.display()), error))?;
        Self::parse(&text).map_err(|error| error.context(path.display()))
    }

    /// Parses and validates the file's text.
    pub fn parse(text: &str) -> Result<Self> {
        let raw: RawChaosFile = serde_norway::from_str(text)
            .map_err(|error| Error::new(ErrorKind::Config, format!("chaos file: {error}")))?;
        let block = serde_norway::to_string(&OnceboxBlock { oncebox: &raw.oncebox })
            .map_err(|error| plumbing("re-reading the oncebox block", error))?;
        let oncebox = Config::from_yaml_str(&block)?;
        let Some(first) = raw.chaos.event_types.first() else {
            return Err(Error::config("chaos.event-types", "name at least one event type"));
        };
        let destination = &oncebox.event(first)?.topic;
        for event_type in &raw.chaos.event_types {
            if &oncebox.event(event_type)?.topic != destination {
                return Err(Error::config(
                    "chaos.event-types",
                    format!("{event_type} has another topic than {first}: a run relays every type to one"),
                ));
            }
        }
        Ok(Self { oncebox, chaos: raw.chaos })
    }

    /// The run's event types.
    pub fn event_types(&self) -> Vec<&str> {
        self.chaos.event_types.iter().map(String::as_str).collect()
    }

    /// The names the run's processes meet on, as the suites' stores and transports take them.
    pub fn names(&self) -> Result<Names> {
        Ok(Names {
            prefix: self.oncebox.tables.names.prefix().to_owned(),
            orders: self.chaos.orders_table.clone(),
            effects: self.chaos.effects_table.clone(),
            destination: self
                .oncebox
                .event(self.event_types().first().copied().unwrap_or_default())?
                .topic
                .clone(),
            consumer: self.chaos.listener_group.clone(),
            dead_letter: self.chaos.dead_letter.clone(),
        })
    }
}

/// Handler failures on purpose: a share of the events fails its first 1–3 handler runs, and a
/// smaller share is poison (every run fails), decided by the event id and the seed alone, so that
/// every consumer process, and the harness, agree on each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HandlerFailures {
    /// Mixed with each event id.
    pub seed: u64,
    /// Events in a thousand whose handler fails its first 1–3 runs.
    pub failing_per_mille: u32,
    /// Events in a thousand whose handler fails every run: the listener must dead-letter them.
    pub poison_per_mille: u32,
}

/// What [`HandlerFailures`] plans for one event's handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    /// Succeeds at its first run.
    Succeeds,
    /// Fails this many runs (1–3), counted over every consumer process, then succeeds.
    FailsFirst(i64),
    /// Fails every run.
    Poison,
}

impl HandlerFailures {
    /// The plan for event `id`.
    pub fn plan(&self, id: Uuid) -> Planned {
        let bits = id.as_u128();
        // Both halves of the id: a UUIDv7's high half is mostly its timestamp.
        let mixed = self.seed ^ (bits as u64) ^ ((bits >> 64) as u64).rotate_left(17);
        let mut rng = fastrand::Rng::with_seed(mixed);
        let roll = rng.u32(0..1_000);
        if roll < self.poison_per_mille {
            Planned::Poison
        } else if roll < self.poison_per_mille + self.failing_per_mille {
            Planned::FailsFirst(rng.i64(1..=3))
        } else {
            Planned::Succeeds
        }
    }

    /// Whether event `id` is poison.
    pub fn is_poison(&self, id: Uuid) -> bool {
        self.plan(id) == Planned::Poison
    }
}

/// The store named by the file, from the environment.
fn store<S: Store>(names: &Names) -> Result<S> {
    S::from_env(names).ok_or_else(|| missing_variable(S::VARIABLE.unwrap_or("the database variable")))
}

/// The transport named by the file, from the environment.
fn transport<T: Transport>() -> Result<T> {
    T::from_env().ok_or_else(|| missing_variable(T::VARIABLE))
}

fn missing_variable(variable: &str) -> Error {
    Error::new(ErrorKind::Config, format!("{variable} is not set"))
}

/// The relay process: an `Oncebox` engine on the file's dialect and broker, running until
/// SIGTERM (or the end of standard input), replacing its stats file every 200 ms.
/// With `drop_sends`, the relay's sender answers the events [`dropped_by_a_broken_relay`] names
/// as acknowledged without sending them, so their rows end PROCESSED and no consumer ever sees them.
pub async fn run_relay(file: &ChaosFile, drop_sends: bool) -> Result<()> {
    crate::with_pair!(file.chaos, relay(file, drop_sends))
}

async fn relay<S: Store, T: Transport>(file: &ChaosFile, drop_sends: bool) -> Result<()> {
    let names = file.names()?;
    if file.oncebox.outbox.is_none() {
        return Err(Error::config("oncebox.outbox", "a relay needs the outbox section"));
    }
    // First, so that a freeze request never meets SIGUSR1's default action (the end of the process).
    let freeze = FreezeRequest::listen()?;
    let inner = transport::<T>()?.sender()?;
    let sender: Arc<dyn Sender> = Arc::new(RelaySender { inner, freeze, drops_sends: drop_sends });
    let store = store::<S>(&names)?;
    let outbox = patiently("chaos_relay", || async {
        Oncebox::builder(file.oncebox.clone())
            .dialect(store.open().await?)
            .sender_arc(sender.clone())
            .start()
            .await
    })
    .await?;
    let stats_path = RelayStats::path(&file.chaos.stats_dir, std::process::id());
    RelayStats::from(outbox.stats()).write(&stats_path)?;

    let mut stop = std::pin::pin!(terminated(file.chaos.exit_on_stdin_eof));
    let failure = loop {
        tokio::select! {
            () = &mut stop => break None,
            () = tokio::time::sleep(STATS_EVERY) => {}
        }
        RelayStats::from(outbox.stats()).write(&stats_path)?;
        if let Lifecycle::Failed(reason) = outbox.state() {
            break Some(reason);
        }
    };
    let shutdown = outbox.shutdown(SHUTDOWN).await;
    RelayStats::from(outbox.stats()).write(&stats_path)?;
    if let Some(reason) = failure {
        return Err(Error::new(ErrorKind::Other, format!("the engine failed: {reason}")));
    }
    shutdown
}

/// How long a freeze request ([`FREEZE_SIGNAL`]) stays valid: a relay that sent nothing within it
/// ignores it, so a request the harness gave up on (and replaced by a plain SIGSTOP) can never
/// freeze the relay later, with nobody to continue it.
pub const FREEZE_REQUEST_VALID: Duration = Duration::from_secs(2);

/// The signal that asks a relay to stop itself right after its next send of a claimed batch, before
/// the batch is settled: the harness's aimed relay stop. Stopped there, the relay holds a claim the
/// broker has already acknowledged; the other relay recovers and re-sends the rows, and the late
/// settle, once the relay is continued, must meet the claim-token fence (a refused settle).
pub const FREEZE_SIGNAL: &str = "-USR1";

/// The time of the last freeze request, in milliseconds since the relay started (0: none).
#[derive(Clone)]
struct FreezeRequest {
    started: std::time::Instant,
    requested_at: Arc<std::sync::atomic::AtomicU64>,
}

impl FreezeRequest {
    /// Installs the [`FREEZE_SIGNAL`] handler.
    fn listen() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut requests = signal(SignalKind::user_defined1())
            .map_err(|error| plumbing("listening for freeze requests (SIGUSR1)", error))?;
        let request = Self { started: std::time::Instant::now(), requested_at: Arc::default() };
        let noted = request.clone();
        tokio::spawn(async move {
            while requests.recv().await.is_some() {
                noted.requested_at.store(noted.now().max(1), std::sync::atomic::Ordering::SeqCst);
            }
        });
        Ok(request)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes a request made within [`FREEZE_REQUEST_VALID`], if there is one.
    fn take(&self) -> bool {
        let at = self.requested_at.swap(0, std::sync::atomic::Ordering::SeqCst);
        let valid = u64::try_from(FREEZE_REQUEST_VALID.as_millis()).unwrap_or(u64::MAX);
        at > 0 && self.now().saturating_sub(at) <= valid
    }
}

/// Every relay's sender: the real one, with two behaviours of the ledger's own. After a send that
/// answers a freeze request the process stops itself (`kill -STOP` on its own pid) before the
/// engine can settle the batch. With `drops_sends` (the deliberately broken relay) the events
/// [`dropped_by_a_broken_relay`] names are answered as acknowledged and never sent. Written without
/// the `async_trait` macro (this crate does not depend on it): the signatures are the ones the
/// macro gives the trait's methods.
struct RelaySender {
    inner: Arc<dyn Sender>,
    freeze: FreezeRequest,
    drops_sends: bool,
}

impl RelaySender {
    /// Sends `batch`, leaving out the events a broken relay drops (answered as acknowledged).
    async fn send_or_drop(
        &self,
        batch: &[OutboundMessage],
        deadline: Deadline,
    ) -> Vec<Result<(), SendError>> {
        if !self.drops_sends {
            return self.inner.send(batch, deadline).await;
        }
        let kept: Vec<OutboundMessage> =
            batch.iter().filter(|message| !dropped_by_a_broken_relay(message.id)).cloned().collect();
        let mut sent = self.inner.send(&kept, deadline).await.into_iter();
        batch
            .iter()
            .map(|message| {
                if dropped_by_a_broken_relay(message.id) {
                    Ok(())
                } else {
                    sent.next().unwrap_or_else(|| {
                        Err(plumbing("the dropping sender", format!("no answer for event {}", message.id)))
                    })
                }
            })
            .collect()
    }
}

impl Sender for RelaySender {
    fn send<'s, 'b, 'f>(
        &'s self,
        batch: &'b [OutboundMessage],
        deadline: Deadline,
    ) -> Pin<Box<dyn Future<Output = Vec<Result<(), SendError>>> + Send + 'f>>
    where
        's: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let results = self.send_or_drop(batch, deadline).await;
            if !batch.is_empty() && self.freeze.take() {
                eprintln!(
                    "chaos_relay: freezing after sending {} events, before settling them (first {})",
                    batch.len(),
                    batch.first().map(|message| message.id.to_string()).unwrap_or_default()
                );
                // The `kill` child stops this process; its status arrives once the harness continues us.
                let stopped = tokio::process::Command::new("kill")
                    .arg("-STOP")
                    .arg(std::process::id().to_string())
                    .status()
                    .await;
                eprintln!("chaos_relay: continued after the freeze ({stopped:?})");
            }
            results
        })
    }

    fn adopt_emergency_timeout(&self, timeout: Duration) -> Result<()> {
        self.inner.adopt_emergency_timeout(timeout)
    }

    fn transport(&self) -> Option<TransportKind> {
        self.inner.transport()
    }

    fn flush<'s, 'f>(&'s self, timeout: Duration) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        self.inner.flush(timeout)
    }
}

/// The consumer process: a consumer-only oncebox (the inbox and its clean-up, no pollers) and
/// the broker's listener, applying each event through [`apply_event`]; with `broken`, without the
/// inbox.
pub async fn run_consumer(file: &ChaosFile, broken: bool) -> Result<()> {
    match file.chaos.flavour {
        Flavour::Transactional => crate::with_pair!(file.chaos, consumer(file, broken)),
        Flavour::Once => crate::with_pair!(file.chaos, once_consumer(file)),
        Flavour::Durable => crate::with_pair!(file.chaos, durable_consumer(file)),
    }
}

/// The durable inbox consumer process: a consumer-only oncebox, a [`StoredInbox`] of the file's
/// inbox consumer with [`durable_settings`], a processor running [`apply_stored`] for each event
/// type in a transaction that also settles the row, and the broker's listener storing every event
/// type in the inbox (`store_in`). A redelivery the inbox answers as a duplicate is noted
/// `duplicate` from the listener's outcome reports, so that copies re-published to the broker show
/// as deliveries. On SIGTERM (or the end of standard input) the listener stops first, then the
/// processor finishes its runs in flight; a SIGKILL leaves their rows PROCESSING until the lease
/// runs out and another consumer's processor takes them over.
async fn durable_consumer<S: Store, T: Transport>(file: &ChaosFile) -> Result<()> {
    let names = Arc::new(file.names()?);
    let mut config = file.oncebox.clone();
    config.outbox = None;
    let oncebox = start_consumer_side::<S>(config, &names).await?;
    let dialect = oncebox.dialect().clone();
    let inbox = StoredInbox::new(file.chaos.inbox_consumer.clone(), dialect.stored_inbox_dao())
        .with_settings(durable_settings())?;
    let deliveries: Arc<str> = file.chaos.deliveries_table.as_str().into();
    let failures = file.chaos.handler_failures;
    let event_types = file.event_types();
    let mut processor = inbox.processor();
    for event_type in &event_types {
        let (handler_dialect, names, deliveries) = (dialect.clone(), names.clone(), deliveries.clone());
        processor = processor.on_in(*event_type, dialect.clone(), move |tx, event: StoredEvent<Order>| {
            let (dialect, names, deliveries) = (handler_dialect.clone(), names.clone(), deliveries.clone());
            Box::pin(async move {
                apply_stored::<S>(tx, &dialect, &names, &deliveries, event.id, failures).await?;
                Ok(())
            })
        });
    }
    let processing = processor.start()?;
    let duplicate: EventNote = Arc::new(move |id| {
        let (dialect, deliveries) = (dialect.clone(), deliveries.clone());
        Box::pin(async move {
            let delivery = S::record_delivery(&dialect, &deliveries, id, std::process::id()).await?;
            S::note_delivery(&dialect, &deliveries, &delivery, "duplicate").await
        })
    });
    let transport = transport::<T>()?;
    let listening = patiently("chaos_consumer", || {
        transport.listen_store(&names, &event_types, &inbox, duplicate.clone())
    })
    .await?;
    let listened = listening.until(terminated(file.chaos.exit_on_stdin_eof)).await;
    if !processing.shutdown(SHUTDOWN).await {
        eprintln!(
            "chaos_consumer: the durable inbox's runs did not finish within {SHUTDOWN:?}; their rows come back after the lease"
        );
    }
    let shutdown = oncebox.shutdown(SHUTDOWN).await;
    listened?;
    shutdown
}

/// One run of a durable inbox handler for event `id`, in `tx` (the processor's transaction, which
/// settles the row PROCESSED once this returns): records the delivery on the pool (committed on its
/// own, so a run that is killed or rolled back still shows), fails on purpose as `failures` plan
/// (before any write in `tx`, noted `failed`; the processor then rolls back and stores the retry in
/// the row), then writes the effect row and notes the delivery `applied`, both in `tx`: they commit
/// with the settle or not at all, so an effect row exists exactly for the run whose settle
/// committed. The pool is used only before the first write in `tx`, so that on SQLite, where the
/// transaction holds the write lock from its first write on, no write of this run waits for it.
pub async fn apply_stored<S: Store>(
    tx: &mut StoreTx<S>,
    dialect: &S::Dialect,
    names: &Names,
    deliveries: &str,
    id: Uuid,
    failures: Option<HandlerFailures>,
) -> Result<()> {
    let delivery = S::record_delivery(dialect, deliveries, id, std::process::id()).await?;
    fail_as_planned::<S>(dialect, deliveries, &delivery, id, failures).await?;
    S::apply_in(tx, names, id).await?;
    S::note_delivery_in(tx, deliveries, &delivery, "applied").await
}

/// The `on_once` consumer process: a consumer-only oncebox and the broker's listener with every
/// event type registered through `on_once` over an inbox with the [`ONCE_LEASE`]. The effect
/// records the delivery, fails on purpose as `handler-failures` plan, writes the effect row and
/// notes `applied`; a delivery the inbox answers as a duplicate never reaches it and is noted
/// `duplicate` from the listener's outcome reports.
async fn once_consumer<S: Store, T: Transport>(file: &ChaosFile) -> Result<()> {
    let names = Arc::new(file.names()?);
    let mut config = file.oncebox.clone();
    config.outbox = None;
    let oncebox = start_consumer_side::<S>(config, &names).await?;
    let inbox = oncebox.inbox(file.chaos.inbox_consumer.clone()).with_lease(ONCE_LEASE);
    let dialect = oncebox.dialect().clone();
    let deliveries: Arc<str> = file.chaos.deliveries_table.as_str().into();
    let failures = file.chaos.handler_failures;
    let stats_dir: Arc<Path> = file.chaos.stats_dir.as_path().into();
    let effect: EventNote = {
        let (dialect, names, deliveries) = (dialect.clone(), names.clone(), deliveries.clone());
        Arc::new(move |id| {
            let (dialect, names, deliveries, stats_dir) =
                (dialect.clone(), names.clone(), deliveries.clone(), stats_dir.clone());
            Box::pin(async move {
                let delivery = S::record_delivery(&dialect, &deliveries, id, std::process::id()).await?;
                fail_as_planned::<S>(&dialect, &deliveries, &delivery, id, failures).await?;
                // The inbox is `on_once`'s, around this effect: the row is written unguarded. A
                // failed write may still have committed (its answer lost in a database restart);
                // the inbox then runs the effect again, and the run keeps the evidence.
                if let Err(error) = S::apply_without_inbox(&dialect, &names, id).await {
                    note_effect_in_doubt(&stats_dir, id)?;
                    return Err(error);
                }
                // The effect happened: a failed note must not fail it, or the inbox would run it
                // again. The delivery then stays without an outcome.
                if let Err(error) = S::note_delivery(&dialect, &deliveries, &delivery, "applied").await {
                    eprintln!("chaos_consumer: noting the applied event {id} failed: {error}");
                }
                Ok(())
            })
        })
    };
    let duplicate: EventNote = Arc::new(move |id| {
        let (dialect, deliveries) = (dialect.clone(), deliveries.clone());
        Box::pin(async move {
            let delivery = S::record_delivery(&dialect, &deliveries, id, std::process::id()).await?;
            S::note_delivery(&dialect, &deliveries, &delivery, "duplicate").await
        })
    });
    let (transport, event_types) = (transport::<T>()?, file.event_types());
    let listening = patiently("chaos_consumer", || {
        transport.listen_once(&names, &event_types, inbox.clone(), effect.clone(), duplicate.clone())
    })
    .await?;
    let listened = listening.until(terminated(file.chaos.exit_on_stdin_eof)).await;
    let shutdown = oncebox.shutdown(SHUTDOWN).await;
    listened?;
    shutdown
}

/// Appends `id` to this process's file of effects whose write failed and may have committed
/// (`effects-in-doubt-<pid>.ids` in `dir`; a local file, since the database may be the trouble).
fn note_effect_in_doubt(dir: &Path, id: Uuid) -> Result<()> {
    use std::io::Write as _;
    let path = dir.join(format!("{EFFECTS_IN_DOUBT}{}.ids", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|error| plumbing(&format!("opening {}", path.display()), error))?;
    writeln!(file, "{id}").map_err(|error| plumbing(&format!("writing {}", path.display()), error))
}

/// The beginning of the files [`note_effect_in_doubt`] writes.
const EFFECTS_IN_DOUBT: &str = "effects-in-doubt-";

/// Every id the `on_once` consumers of a run noted as an effect in doubt, in `dir`, once per note.
pub fn effects_in_doubt(dir: &Path) -> Result<Vec<Uuid>> {
    let mut ids = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|error| plumbing("listing the run's files", error))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(EFFECTS_IN_DOUBT) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).map_err(|error| plumbing(&name, error))?;
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            ids.push(Uuid::parse_str(line.trim()).map_err(|error| plumbing(&name, error))?);
        }
    }
    Ok(ids)
}

/// Fails the delivery `delivery` of event `id` as `failures` plan, noting it `failed`: a poison
/// event always, another while fewer of its deliveries (in any process) than planned have failed.
async fn fail_as_planned<S: Store>(
    dialect: &S::Dialect,
    deliveries: &str,
    delivery: &str,
    id: Uuid,
    failures: Option<HandlerFailures>,
) -> Result<()> {
    let Some(planned) = failures.map(|failures| failures.plan(id)) else { return Ok(()) };
    let fails = match planned {
        Planned::Succeeds => false,
        Planned::Poison => true,
        Planned::FailsFirst(runs) => S::failed_deliveries(dialect, deliveries, id).await? < runs,
    };
    if !fails {
        return Ok(());
    }
    S::note_delivery(dialect, deliveries, delivery, FAILED).await?;
    Err(Error::new(ErrorKind::Other, format!("event {id}: the handler fails on purpose ({planned:?})")))
}

/// A consumer-only oncebox (no outbox section) on the run's store, started [`patiently`].
async fn start_consumer_side<S: Store>(config: Config, names: &Names) -> Result<Oncebox<S::Dialect>> {
    let store = store::<S>(names)?;
    patiently("chaos_consumer", || async {
        Oncebox::builder(config.clone()).dialect(store.open().await?).start().await
    })
    .await
}

async fn consumer<S: Store, T: Transport>(file: &ChaosFile, broken: bool) -> Result<()> {
    let names = Arc::new(file.names()?);
    let mut config = file.oncebox.clone();
    config.outbox = None;
    let oncebox = start_consumer_side::<S>(config, &names).await?;
    let inbox = oncebox.inbox(file.chaos.inbox_consumer.clone());
    let dialect = oncebox.dialect().clone();
    let deliveries: Arc<str> = file.chaos.deliveries_table.as_str().into();
    let failures = file.chaos.handler_failures;
    let handler: EventHandler = {
        let names = names.clone();
        Arc::new(move |id, _order| {
            let (dialect, inbox, names, deliveries) =
                (dialect.clone(), inbox.clone(), names.clone(), deliveries.clone());
            Box::pin(async move {
                apply_event::<S>(&dialect, &inbox, &names, &deliveries, id, broken, failures).await
            })
        })
    };
    let (transport, event_types) = (transport::<T>()?, file.event_types());
    let listening =
        patiently("chaos_consumer", || transport.listen(&names, &event_types, handler.clone())).await?;
    let listened = listening.until(terminated(file.chaos.exit_on_stdin_eof)).await;
    let shutdown = oncebox.shutdown(SHUTDOWN).await;
    listened?;
    shutdown
}

/// Handles one delivery of event `id`: records the delivery (committed on its own, so a SIGKILL
/// right after loses nothing), applies the effect through the inbox ([`Store::apply`]: the inbox
/// record and the effect row in one transaction), then notes the outcome on the delivery row.
/// With `broken`, the effect row is written without any inbox check, so every redelivery applies
/// it again, and the handler returns (the listener acknowledges) only
/// [`BROKEN_ACKNOWLEDGES_AFTER`] later, so a consumer kill most likely meets an applied event.
///
/// With `failures`, the handler of an event they plan to fail fails before its effect, its
/// delivery noted `failed`: a poison event always, another while fewer of its deliveries (in any
/// process) than planned have failed.
pub async fn apply_event<S: Store>(
    dialect: &S::Dialect,
    inbox: &StoreInbox<S>,
    names: &Names,
    deliveries: &str,
    id: Uuid,
    broken: bool,
    failures: Option<HandlerFailures>,
) -> Result<Consumed<()>> {
    let delivery = S::record_delivery(dialect, deliveries, id, std::process::id()).await?;
    fail_as_planned::<S>(dialect, deliveries, &delivery, id, failures).await?;
    let outcome = if broken {
        S::apply_without_inbox(dialect, names, id).await?;
        Consumed::Applied(())
    } else {
        S::apply(dialect, inbox, names, id, false).await?
    };
    let label = match outcome {
        Consumed::Applied(()) => "applied",
        Consumed::Duplicate => "duplicate",
    };
    S::note_delivery(dialect, deliveries, &delivery, label).await?;
    if broken {
        tokio::time::sleep(BROKEN_ACKNOWLEDGES_AFTER).await;
    }
    Ok(outcome)
}

/// The counters of one relay process, as its stats file last had them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Rows claimed.
    pub claimed: u64,
    /// Events the broker acknowledged.
    pub delivered: u64,
    /// Settles refused by the claim-token fence.
    pub refused_settles: u64,
    /// Rows returned to PENDING by stuck recovery.
    pub recovered: u64,
}

impl From<StatsSnapshot> for RelayStats {
    fn from(stats: StatsSnapshot) -> Self {
        Self {
            claimed: stats.claimed,
            delivered: stats.delivered,
            refused_settles: stats.refused_settles,
            recovered: stats.recovered,
        }
    }
}

impl RelayStats {
    /// The stats file of the relay process `pid` in `dir`.
    pub fn path(dir: &Path, pid: u32) -> PathBuf {
        dir.join(format!("relay-{pid}.stats"))
    }

    /// Replaces the file at `path` (written aside and renamed, so a reader never sees half).
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "claimed {}\ndelivered {}\nrefused_settles {}\nrecovered {}\n",
            self.claimed, self.delivered, self.refused_settles, self.recovered
        );
        let aside = path.with_extension("stats.new");
        std::fs::write(&aside, text).map_err(|error| plumbing("writing the stats file", error))?;
        std::fs::rename(&aside, path).map_err(|error| plumbing("renaming the stats file", error))
    }

    /// Every relay's stats in `dir`, by file name.
    pub fn read_all(dir: &Path) -> Result<Vec<(String, Self)>> {
        let mut all = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|error| plumbing("listing the stats files", error))?;
        for entry in entries {
            let entry = entry.map_err(|error| plumbing("listing the stats files", error))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".stats") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|error| plumbing("reading a stats file", error))?;
            let mut stats = Self::default();
            for line in text.lines() {
                let Some((key, value)) = line.split_once(' ') else { continue };
                let value: u64 = value.parse().map_err(|error| plumbing(&format!("{name}: {key}"), error))?;
                match key {
                    "claimed" => stats.claimed = value,
                    "delivered" => stats.delivered = value,
                    "refused_settles" => stats.refused_settles = value,
                    "recovered" => stats.recovered = value,
                    _ => {}
                }
            }
            all.push((name, stats));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }
}

/// Completes on SIGTERM or Ctrl-C, and with `stdin_eof` also when standard input ends.
pub async fn terminated(stdin_eof: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let (ended, input_ended) = tokio::sync::oneshot::channel::<()>();
    if stdin_eof {
        // A plain thread: the read blocks until the writer (the harness) closes the pipe or dies.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            let _ = ended.send(());
        });
    } else {
        // The receiver then fails at once, which disables its branch below.
        drop(ended);
    }
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
        Ok(()) = input_ended => {}
    }
}

/// Logs to stderr (`RUST_LOG`, `warn` when unset).
///
/// The inbox's warnings are always on and written without colours: the harness reads from them
/// which `on_once` claims the inbox reports left in flight after their effect
/// ([`INBOX_LEFT_IN_FLIGHT`]).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let filter = match "oncebox_core::inbox=warn".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The beginnings of the inbox's warnings (`oncebox_core::inbox`) that a `consume_once` claim
/// stays in flight although its effect ran: marking it applied failed, or the effect outlasted the
/// lease and another delivery took the claim over. A redelivery after the lease runs the effect
/// again, as the inbox warns.
pub const INBOX_LEFT_IN_FLIGHT: [&str; 2] =
    ["could not mark the applied effect in the inbox", "the effect outlasted the inbox lease"];

/// The event ids of the [`INBOX_LEFT_IN_FLIGHT`] warnings in a consumer's log `text`, once per
/// warning (the `id=<uuid>` field of each such line).
pub fn left_in_flight(text: &str) -> Vec<Uuid> {
    text.lines()
        .filter(|line| {
            line.contains("oncebox_core::inbox") && INBOX_LEFT_IN_FLIGHT.iter().any(|w| line.contains(w))
        })
        .filter_map(|line| {
            let (_, after) = line.split_once(" id=")?;
            Uuid::parse_str(after.split_whitespace().next()?).ok()
        })
        .collect()
}

/// The `--config <path>` argument of a chaos binary.
pub fn config_argument() -> Result<PathBuf> {
    let mut arguments = std::env::args_os().skip(1);
    while let Some(argument) = arguments.next() {
        if argument == "--config" {
            return arguments
                .next()
                .map(PathBuf::from)
                .ok_or_else(|| Error::new(ErrorKind::Config, "--config needs a path"));
        }
        if let Some(path) = argument.to_str().and_then(|text| text.strip_prefix("--config=")) {
            return Ok(PathBuf::from(path));
        }
    }
    Err(Error::new(ErrorKind::Config, "usage: --config <file.yaml>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_start_retries_an_absent_server_and_fails_at_once_on_bad_config() {
        let mut tries = 0;
        let started = patiently("test", || {
            tries += 1;
            let tries = tries;
            async move {
                match tries {
                    1 => Err(Error::new(ErrorKind::Database, "connecting to PostgreSQL (EOF)")),
                    2 => Err(Error::new(ErrorKind::Broker, "connection refused")),
                    _ => Ok(tries),
                }
            }
        })
        .await;
        assert_eq!(started.ok(), Some(3));

        let mut tries = 0;
        let failed: Result<()> = patiently("test", || {
            tries += 1;
            async { Err(Error::config("oncebox.outbox", "a relay needs the outbox section")) }
        })
        .await;
        assert_eq!(failed.map_err(|error| error.kind()), Err(ErrorKind::Config));
        assert_eq!(tries, 1);
    }

    #[test]
    fn the_inbox_warnings_of_claims_left_in_flight_name_their_ids() {
        let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
        let log = format!(
            "2026-01-01T00:00:00.000000Z  WARN oncebox.consume{{event_id={second} consumer=q}}: oncebox_core::inbox: \
             could not mark the applied effect in the inbox; after the lease a redelivery may run it again \
             consumer=once-effects id={first} error=pool timed out\n\
             2026-01-01T00:00:01.000000Z  WARN oncebox_core::inbox: the effect outlasted the inbox lease and another \
             delivery took the claim over: the effect may run twice; raise the lease consumer=once-effects id={second} lease=3s\n\
             2026-01-01T00:00:02.000000Z  WARN oncebox_core::inbox: could not release the inbox claim after a failed \
             effect consumer=once-effects id={second} error=down\n"
        );
        assert_eq!(left_in_flight(&log), vec![first, second]);
    }

    #[test]
    fn a_plan_is_the_same_for_every_process_and_fails_a_few_events() {
        let failures = HandlerFailures { seed: 7, failing_per_mille: 30, poison_per_mille: 1 };
        let ids: Vec<Uuid> = (0..20_000).map(|_| Uuid::now_v7()).collect();
        let plans: Vec<Planned> = ids.iter().map(|id| failures.plan(*id)).collect();
        assert_eq!(plans, ids.iter().map(|id| failures.plan(*id)).collect::<Vec<_>>());
        let poison = plans.iter().filter(|plan| **plan == Planned::Poison).count();
        let failing = plans.iter().filter(|plan| matches!(plan, Planned::FailsFirst(1..=3))).count();
        assert!((5..=60).contains(&poison), "{poison} poison in 20,000");
        assert!((400..=800).contains(&failing), "{failing} failing in 20,000");
    }
}
