//! End-to-end latency under a steady load, on PostgreSQL with Kafka or RabbitMQ: how long an event
//! waits between its business commit and the broker's acknowledgement, its settle, and the
//! consumer's effect, while the relay is not draining a backlog.
//!
//! For each cell of the matrix (broker × polling × wake-ups × load) the binary creates fresh tables,
//! a fresh topic or exchange and queue, starts one engine and one listener (an `on_once` handler
//! through the inbox on the same database), and runs publisher tasks that commit one event per
//! transaction on a schedule: a steady rate, or bursts (1 s at four times the rate, then 3 s quiet,
//! the same mean). Every event is stamped four times on this process's monotonic clock:
//!
//! * **commit**: `COMMIT` of the publishing transaction returned;
//! * **ack**: the sender returned the broker's acknowledgement of its batch (decorator around the
//!   sender);
//! * **settle**: the settle that marked it PROCESSED returned (decorator around the outbox DAO);
//! * **effect**: the consumer's effect ran (after the inbox recorded the id).
//!
//! A cell ends when every event has been through all four, and prints one row of percentiles;
//! the end of the run prints all rows again as one Markdown table. The binary is a measurement:
//! it asserts no target.

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::{Parser, ValueEnum};
use oncebox_benches::kafka::create_topic;
use oncebox_benches::observe::{ObservedOutbox, OutboxObserver};
use oncebox_benches::pg_backlog::Bench;
use oncebox_benches::rabbit::Topology;
use oncebox_benches::{BenchPayload, BenchResult, EVENT_TYPE, Summary, fresh_name, millis, server_url};
use oncebox_core::config::{EventSettings, Polling};
use oncebox_core::{
    ClaimedBatch, Config, Deadline, Dialect, Engine, EngineHandle, EngineParts, Inbox, Lifecycle,
    OutboundMessage, Publisher, SendError, Sender, Settlement,
};
use oncebox_kafka::{KafkaEvent, KafkaListener, KafkaListenerConfig, KafkaSender, KafkaSenderConfig};
use oncebox_postgres::PgDialect;
use oncebox_rabbit::{
    RabbitEvent, RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig, RabbitTopology,
};
use tokio::sync::oneshot;
use uuid::Uuid;

/// Longest a cell waits for its last events after the load ended.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Broker {
    Kafka,
    Rabbit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PollingProfile {
    /// The event defaults: adaptive, 250 ms minimum, 1 min maximum, ×1.5.
    Default,
    /// The low-latency settings of docs/configuration.md: adaptive, 10 ms minimum, 1 s maximum, ×2.
    Fast,
}

impl PollingProfile {
    fn polling(self) -> Polling {
        match self {
            PollingProfile::Default => oncebox_core::config::EventConfig::new("t").polling,
            PollingProfile::Fast => Polling::Adaptive {
                initial_delay: Duration::ZERO,
                min_delay: Duration::from_millis(10),
                max_delay: Duration::from_secs(1),
                multiplier: 2.0,
            },
        }
    }

    fn label(self) -> &'static str {
        match self {
            PollingProfile::Default => "default (250 ms–1 min)",
            PollingProfile::Fast => "fast (10 ms–1 s)",
        }
    }
}

/// A publishing schedule: a steady rate, or `bursty:<mean rate>`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Load {
    Steady(u32),
    Bursty(u32),
}

impl std::str::FromStr for Load {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (bursty, rate) = match text.strip_prefix("bursty:") {
            Some(rate) => (true, rate),
            None => (false, text),
        };
        let rate: u32 = rate.parse().ok().filter(|rate| *rate > 0).ok_or_else(|| {
            format!("load `{text}`: expected events per second (e.g. 1000) or bursty:<rate>")
        })?;
        Ok(if bursty { Load::Bursty(rate) } else { Load::Steady(rate) })
    }
}

impl Load {
    fn mean_rate(self) -> u32 {
        match self {
            Load::Steady(rate) | Load::Bursty(rate) => rate,
        }
    }

    /// When event `index` is due, from the start of the load.
    fn due(self, index: u64) -> Duration {
        match self {
            Load::Steady(rate) => Duration::from_secs_f64(index as f64 / f64::from(rate)),
            Load::Bursty(rate) => {
                // 1 s at four times the mean rate, then 3 s without events.
                let per_burst = u64::from(rate) * 4;
                let burst = index / per_burst;
                let within = (index % per_burst) as f64 / per_burst as f64;
                Duration::from_secs_f64(burst as f64 * 4.0 + within)
            }
        }
    }

    fn label(self) -> String {
        match self {
            Load::Steady(rate) => format!("{rate}/s steady"),
            Load::Bursty(rate) => format!("{rate}/s bursty (1 s at {}/s, 3 s quiet)", rate * 4),
        }
    }
}

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    about = "oncebox commit → ack → settle → effect latency under steady load (ONCEBOX_PG_URL, ONCEBOX_KAFKA_BOOTSTRAP, ONCEBOX_AMQP_URL)"
)]
struct Args {
    /// Brokers to measure.
    #[arg(long, value_delimiter = ',', default_value = "kafka,rabbit")]
    brokers: Vec<Broker>,
    /// Loads: events per second, or bursty:<mean events per second>.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,bursty:1000")]
    loads: Vec<Load>,
    /// Wake-ups (LISTEN/NOTIFY): on, off.
    #[arg(long, value_delimiter = ',', default_value = "on,off")]
    wake_ups: Vec<String>,
    /// Polling settings.
    #[arg(long, value_delimiter = ',', default_value = "default,fast")]
    polling: Vec<PollingProfile>,
    /// Seconds of load per cell.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Publishing tasks (each commits one event per transaction on its own connection).
    #[arg(long, default_value_t = 4)]
    publishers: usize,
    /// The Kafka listener's `fetch.wait.max.ms` (librdkafka's default, 500, when absent).
    #[arg(long)]
    fetch_wait_ms: Option<u32>,
    /// Seconds at the start of the load whose events are delivered but left out of the
    /// percentiles: the poller's delay has grown while nothing was published, so the first events
    /// measure the cold start, not the steady state. 0 keeps every event.
    #[arg(long, default_value_t = 0)]
    warm_up_seconds: u64,
    /// Event types the load is spread over, round robin, each its own poller (`bench-event` alone
    /// for 1; `bench-event-1` … otherwise). The rows then also give the worst and the best
    /// type's p99, which shows whether `thread-pool-size` starves a type.
    #[arg(long, default_value_t = 1)]
    event_types: usize,
    /// The engine's `thread-pool-size` (pollers running at once); its default when absent.
    #[arg(long)]
    thread_pool_size: Option<usize>,
    /// Run no consumer: commit → ack and → settle only, without the consumer's load on the
    /// machine and the database (RabbitMQ messages go to a queue that is deleted at the end).
    #[arg(long)]
    no_consumer: bool,
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args)).map_err(|error| -> Box<dyn Error> { error })
}

async fn run(args: Args) -> BenchResult<()> {
    if args.seconds == 0 || args.publishers == 0 {
        return Err("--seconds and --publishers must be at least 1".into());
    }
    let wake_ups = args
        .wake_ups
        .iter()
        .map(|value| match value.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            other => Err(format!("--wake-ups: `{other}` is neither on nor off")),
        })
        .collect::<Result<Vec<bool>, String>>()?;
    let pg_url = server_url("ONCEBOX_PG_URL", "postgres://postgres@127.0.0.1:5432/test")?;
    let mut brokers = Vec::new();
    for broker in &args.brokers {
        brokers.push(match broker {
            Broker::Kafka => (*broker, server_url("ONCEBOX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")?),
            Broker::Rabbit => {
                (*broker, server_url("ONCEBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")?)
            }
        });
    }
    println!(
        "{} CPUs shared by this process and the servers; {} s of load per cell, {} publishing tasks",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        args.seconds,
        args.publishers
    );
    let mut rows = Vec::new();
    for (broker, address) in &brokers {
        for polling in &args.polling {
            for wake in &wake_ups {
                for load in &args.loads {
                    let cell = Cell { broker: *broker, polling: *polling, wake_ups: *wake, load: *load };
                    let row = cell.run(&args, &pg_url, address).await?;
                    println!("{}", row.markdown());
                    rows.push(row);
                }
            }
        }
    }
    println!("\n{}", Row::header());
    for row in &rows {
        println!("{}", row.markdown());
    }
    Ok(())
}

/// One configuration of the matrix.
#[derive(Debug, Clone, Copy)]
struct Cell {
    broker: Broker,
    polling: PollingProfile,
    wake_ups: bool,
    load: Load,
}

/// The four stamps of every event, by id.
#[derive(Default)]
struct Stamps {
    commit: Mutex<HashMap<Uuid, Instant>>,
    ack: Mutex<HashMap<Uuid, Instant>>,
    settle: Mutex<HashMap<Uuid, Instant>>,
    effect: Mutex<HashMap<Uuid, Instant>>,
    /// Time each claim, send and settle took, summed, and how many ran.
    claims: AtomicU64,
    claim_nanos: AtomicU64,
    send_nanos: AtomicU64,
    settles: AtomicU64,
    settle_nanos: AtomicU64,
    /// The longest claim, send and settle.
    claim_max: AtomicU64,
    send_max: AtomicU64,
    settle_max: AtomicU64,
    /// When each claim began, for the gaps between polls.
    claim_starts: Mutex<Vec<Instant>>,
    /// The event type (its index) of every event.
    types: Mutex<HashMap<Uuid, usize>>,
}

/// The event types of a run over `count` types.
fn event_types(count: usize) -> Vec<String> {
    match count {
        0 | 1 => vec![EVENT_TYPE.to_owned()],
        _ => (1..=count).map(|index| format!("{EVENT_TYPE}-{index}")).collect(),
    }
}

fn stamp(map: &Mutex<HashMap<Uuid, Instant>>, ids: impl Iterator<Item = Uuid>) {
    let now = Instant::now();
    if let Ok(mut map) = map.lock() {
        for id in ids {
            map.entry(id).or_insert(now);
        }
    }
}

fn count(map: &Mutex<HashMap<Uuid, Instant>>) -> usize {
    map.lock().map(|map| map.len()).unwrap_or(0)
}

fn add_nanos(counter: &AtomicU64, elapsed: Duration) {
    counter.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

fn max_nanos(counter: &AtomicU64, elapsed: Duration) {
    counter.fetch_max(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

impl OutboxObserver for Stamps {
    fn claimed(&self, elapsed: Duration, _batch: &ClaimedBatch) {
        self.claims.fetch_add(1, Ordering::Relaxed);
        add_nanos(&self.claim_nanos, elapsed);
        max_nanos(&self.claim_max, elapsed);
        if let (Some(started), Ok(mut starts)) =
            (Instant::now().checked_sub(elapsed), self.claim_starts.lock())
        {
            starts.push(started);
        }
    }

    fn settled(&self, elapsed: Duration, _batch: &ClaimedBatch, settlements: &[Settlement]) {
        self.settles.fetch_add(1, Ordering::Relaxed);
        add_nanos(&self.settle_nanos, elapsed);
        max_nanos(&self.settle_max, elapsed);
        stamp(
            &self.settle,
            settlements.iter().filter_map(|settlement| match settlement {
                Settlement::Processed { id } => Some(*id),
                _ => None,
            }),
        );
    }
}

/// Stamps the acknowledged events of every batch; everything else passes through.
struct StampingSender {
    inner: Arc<dyn Sender>,
    stamps: Arc<Stamps>,
}

#[async_trait]
impl Sender for StampingSender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        let started = Instant::now();
        let results = self.inner.send(batch, deadline).await;
        add_nanos(&self.stamps.send_nanos, started.elapsed());
        max_nanos(&self.stamps.send_max, started.elapsed());
        stamp(
            &self.stamps.ack,
            batch.iter().zip(&results).filter(|(_, result)| result.is_ok()).map(|(message, _)| message.id),
        );
        results
    }

    fn adopt_emergency_timeout(&self, timeout: Duration) -> oncebox_core::Result<()> {
        self.inner.adopt_emergency_timeout(timeout)
    }

    async fn flush(&self, timeout: Duration) -> oncebox_core::Result<()> {
        self.inner.flush(timeout).await
    }
}

/// A running listener and how it is stopped.
struct Listening {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<oncebox_core::Result<()>>,
}

impl Listening {
    fn spawn<F>(run: impl FnOnce(oneshot::Receiver<()>) -> F) -> Self
    where
        F: std::future::Future<Output = oncebox_core::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        Self { stop, task: tokio::spawn(run(stopped)) }
    }

    async fn stop(self) -> BenchResult<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

/// Where a cell's events go: the sender, its topic or exchange, the consumer (unless
/// `--no-consumer`), and the queue declared for a RabbitMQ run without one.
struct Transport {
    sender: Arc<dyn Sender>,
    topic: String,
    listener: Option<Listening>,
    declared: Option<(lapin::Connection, lapin::Channel, Topology)>,
}

impl Transport {
    async fn close(self) -> BenchResult<()> {
        if let Some(listener) = self.listener {
            listener.stop().await?;
        }
        if let Some((connection, channel, topology)) = self.declared {
            topology.clean_up(&channel).await?;
            let _ = connection.close(200, lapin::types::ShortString::from("benchmark done")).await;
        }
        Ok(())
    }
}

impl Cell {
    async fn run(self, args: &Args, pg_url: &str, address: &str) -> BenchResult<Row> {
        let bench = Bench::connect(pg_url.to_owned(), "lat_").await?;
        bench.create_tables().await?;
        let outcome = self.measure(args, &bench, address).await;
        let dropped = bench.drop_everything().await;
        bench.pool.close().await;
        let row = outcome?;
        dropped?;
        Ok(row)
    }

    async fn measure(self, args: &Args, bench: &Bench, address: &str) -> BenchResult<Row> {
        let stamps = Arc::new(Stamps::default());
        let types = event_types(args.event_types);
        let relay = bench.instance().await?.with_wake_ups(self.wake_ups);
        let transport = self.transport(bench, address, &relay, &stamps, args, &types).await?;
        let engine =
            self.start_engine(bench, &relay, &transport, &stamps, &types, args.thread_pool_size).await?;
        let publisher = Publisher::new(
            bench.dialect.clone().with_wake_ups(self.wake_ups).writer(),
            types.iter().cloned(),
        );
        let total = u64::from(self.load.mean_rate()) * args.seconds;
        let load_started = Instant::now();
        let lateness =
            publish_load(bench, &publisher, &types, self.load, total, args.publishers, &stamps).await?;
        let load_elapsed = load_started.elapsed();
        let waited = wait_for_all(&stamps, total as usize, &engine, transport.listener.is_some()).await;
        engine.shutdown(Duration::from_secs(30)).await?;
        let closed = transport.close().await;
        relay.pool().close().await;
        waited?;
        closed?;
        let measured_from = load_started + Duration::from_secs(args.warm_up_seconds);
        Ok(Row::new(self, &stamps, total, load_elapsed, lateness, measured_from))
    }

    async fn transport(
        self,
        bench: &Bench,
        address: &str,
        relay: &PgDialect,
        stamps: &Arc<Stamps>,
        args: &Args,
        types: &[String],
    ) -> BenchResult<Transport> {
        let inbox: Inbox<()> = Inbox::new("latency-bench", relay.inbox_dao(), ());
        let effects = stamps.clone();
        let effect = move |id: Uuid| {
            let effects = effects.clone();
            async move {
                stamp(&effects.effect, std::iter::once(id));
                Ok(())
            }
        };
        let consume = !args.no_consumer;
        match self.broker {
            Broker::Kafka => {
                let stem = format!("{}-", bench.tables.prefix().trim_end_matches('_'));
                let topic = create_topic(address, &stem).await?;
                let listener = if consume {
                    let mut config =
                        KafkaListenerConfig::new(address, fresh_name("latency-group-"), [topic.clone()]);
                    if let Some(wait) = args.fetch_wait_ms {
                        config = config.with_consumer_property("fetch.wait.max.ms", wait.to_string());
                    }
                    let mut builder = KafkaListener::builder(config);
                    for event_type in types {
                        let effect = effect.clone();
                        builder = builder.on_once(
                            event_type.clone(),
                            inbox.clone(),
                            move |event: KafkaEvent<serde_json::Value>| effect(event.id),
                        );
                    }
                    let listener = builder.build()?;
                    Some(Listening::spawn(|stopped| async move {
                        listener
                            .run(async move {
                                let _ = stopped.await;
                            })
                            .await
                    }))
                } else {
                    None
                };
                let sender = KafkaSender::new(KafkaSenderConfig::new(address))?;
                Ok(Transport { sender: Arc::new(sender), topic, listener, declared: None })
            }
            Broker::Rabbit => {
                let topology = Topology::fresh();
                let (listener, declared) = if consume {
                    let config = RabbitListenerConfig::new(address, topology.queue.clone())
                        .with_declare(RabbitTopology::new(topology.exchange.clone()));
                    let mut builder = RabbitListener::builder(config);
                    for event_type in types {
                        let effect = effect.clone();
                        builder = builder.on_once(
                            event_type.clone(),
                            inbox.clone(),
                            move |event: RabbitEvent<serde_json::Value>| effect(event.id),
                        );
                    }
                    let listener = builder.build()?;
                    let listening = Listening::spawn(|stopped| async move {
                        listener
                            .run(async move {
                                let _ = stopped.await;
                            })
                            .await
                    });
                    // The listener declares the exchange and binds its queue once connected; a
                    // send before that would come back unroutable.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    (Some(listening), None)
                } else {
                    let connection =
                        lapin::Connection::connect(address, lapin::ConnectionProperties::default()).await?;
                    let channel = connection.create_channel().await?;
                    topology.declare(&channel, types).await?;
                    (None, Some((connection, channel, topology.clone())))
                };
                let sender = RabbitSender::new(RabbitSenderConfig::new(address))?;
                Ok(Transport { sender: Arc::new(sender), topic: topology.exchange, listener, declared })
            }
        }
    }

    async fn start_engine(
        self,
        bench: &Bench,
        relay: &PgDialect,
        transport: &Transport,
        stamps: &Arc<Stamps>,
        types: &[String],
        thread_pool_size: Option<usize>,
    ) -> BenchResult<EngineHandle> {
        let mut config = Config::builder().table_prefix(bench.tables.prefix()).processed_clean_up(None);
        if let Some(size) = thread_pool_size {
            config = config.thread_pool_size(size);
        }
        for event_type in types {
            config = config
                .event(event_type, EventSettings::new(&transport.topic).polling(self.polling.polling()));
        }
        let config = config.build()?;
        let mut parts = EngineParts::new(config);
        parts.outbox = Some(Arc::new(ObservedOutbox::new(relay.outbox_dao(), stamps.clone())));
        parts.dlq = Some(relay.dlq_dao());
        parts.inbox = Some(relay.inbox_dao());
        parts.job_lock = Some(relay.job_lock());
        parts.sender =
            Some(Arc::new(StampingSender { inner: transport.sender.clone(), stamps: stamps.clone() }));
        parts.wake_source = relay.wake_source().await?;
        let engine = Engine::start(parts)?;
        // Let the first (empty) poll and the listener's subscription happen before the load.
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(engine)
    }
}

/// Commits `total` events on `load`'s schedule from `publishers` tasks; returns how late each
/// transaction began against its schedule (the load generator keeping up, or not).
async fn publish_load(
    bench: &Bench,
    publisher: &Publisher<oncebox_postgres::PgWriter>,
    types: &[String],
    load: Load,
    total: u64,
    publishers: usize,
    stamps: &Arc<Stamps>,
) -> BenchResult<Vec<Duration>> {
    let next = Arc::new(AtomicU64::new(0));
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..publishers {
        let (next, stamps, publisher, pool, types) =
            (next.clone(), stamps.clone(), publisher.clone(), bench.pool.clone(), types.to_vec());
        tasks.spawn(async move {
            let mut lateness = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return Ok::<_, oncebox_benches::BenchError>(lateness);
                }
                let due = started + load.due(index);
                tokio::time::sleep_until(due).await;
                lateness.push(tokio::time::Instant::now().saturating_duration_since(due));
                let mut tx = pool.begin().await?;
                let type_index = (index % types.len() as u64) as usize;
                let id = publisher.publish(&mut tx, &types[type_index], &BenchPayload::new(index)).await?;
                tx.commit().await?;
                stamp(&stamps.commit, std::iter::once(id));
                if let Ok(mut by_id) = stamps.types.lock() {
                    by_id.insert(id, type_index);
                }
            }
        });
    }
    let mut lateness = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        lateness.extend(joined??);
    }
    Ok(lateness)
}

/// Waits until every event was committed, acknowledged, settled and applied.
async fn wait_for_all(
    stamps: &Stamps,
    total: usize,
    engine: &EngineHandle,
    consuming: bool,
) -> BenchResult<()> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let effects = if consuming { count(&stamps.effect) } else { total };
        let counts = [count(&stamps.ack), count(&stamps.settle), effects];
        if counts.iter().all(|count| *count >= total) {
            return Ok(());
        }
        if let Lifecycle::Failed(reason) = engine.state() {
            return Err(format!("engine failed: {reason}").into());
        }
        if Instant::now() > deadline {
            return Err(
                format!("after {SETTLE_TIMEOUT:?}: acked, settled, applied = {counts:?} of {total}").into()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A latency's p50, p99, p99.9 and maximum as four table cells; dashes when nothing was measured.
fn cells(summary: &Summary) -> String {
    if summary.count == 0 {
        return "– | – | – | –".to_owned();
    }
    format!(
        "{} | {} | {} | {}",
        millis(summary.p50),
        millis(summary.p99),
        millis(summary.p999),
        millis(summary.max)
    )
}

/// One printed row.
struct Row {
    cell: Cell,
    events: u64,
    achieved_rate: f64,
    lateness_p99: Duration,
    ack: Summary,
    settle: Summary,
    effect: Summary,
    claims: u64,
    claim_ms: f64,
    send_ms: f64,
    settle_ms: f64,
    /// The longest claim, send and settle.
    maxima: [Duration; 3],
    /// Time between the starts of consecutive claims.
    poll_gaps: Summary,
    /// Over several event types: how many, the worst and the best type's p99 commit→ack.
    per_type: Option<(usize, Duration, Duration)>,
}

impl Row {
    fn new(
        cell: Cell,
        stamps: &Stamps,
        events: u64,
        load_elapsed: Duration,
        lateness: Vec<Duration>,
        measured_from: Instant,
    ) -> Self {
        let empty = HashMap::new();
        let commit = stamps.commit.lock();
        let commit: HashMap<Uuid, Instant> = commit
            .as_deref()
            .unwrap_or(&empty)
            .iter()
            .filter(|(_, committed)| **committed >= measured_from)
            .map(|(id, committed)| (*id, *committed))
            .collect();
        let since_commit = |map: &Mutex<HashMap<Uuid, Instant>>| {
            let map = map.lock();
            let map = map.as_deref().unwrap_or(&empty);
            Summary::of(
                &map.iter()
                    .filter_map(|(id, at)| {
                        commit.get(id).map(|committed| at.saturating_duration_since(*committed))
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let per_call = |nanos: &AtomicU64, calls: u64| {
            if calls == 0 { 0.0 } else { nanos.load(Ordering::Relaxed) as f64 / calls as f64 / 1e6 }
        };
        let claims = stamps.claims.load(Ordering::Relaxed);
        let settles = stamps.settles.load(Ordering::Relaxed);
        Self {
            cell,
            events,
            achieved_rate: events as f64 / load_elapsed.as_secs_f64().max(1e-9),
            lateness_p99: Summary::of(&lateness).p99,
            ack: since_commit(&stamps.ack),
            settle: since_commit(&stamps.settle),
            effect: since_commit(&stamps.effect),
            claims,
            claim_ms: per_call(&stamps.claim_nanos, claims),
            send_ms: per_call(&stamps.send_nanos, settles),
            settle_ms: per_call(&stamps.settle_nanos, settles),
            maxima: [&stamps.claim_max, &stamps.send_max, &stamps.settle_max]
                .map(|max| Duration::from_nanos(max.load(Ordering::Relaxed))),
            per_type: {
                let types = stamps.types.lock().map(|types| types.clone()).unwrap_or_default();
                let acks = stamps.ack.lock().map(|acks| acks.clone()).unwrap_or_default();
                let mut by_type: HashMap<usize, Vec<Duration>> = HashMap::new();
                for (id, acked) in &acks {
                    if let (Some(committed), Some(index)) = (commit.get(id), types.get(id)) {
                        by_type.entry(*index).or_default().push(acked.saturating_duration_since(*committed));
                    }
                }
                let p99s: Vec<Duration> =
                    by_type.into_values().map(|samples| Summary::of(&samples).p99).collect();
                (p99s.len() > 1).then(|| {
                    let worst = p99s.iter().max().copied().unwrap_or_default();
                    let best = p99s.iter().min().copied().unwrap_or_default();
                    (p99s.len(), worst, best)
                })
            },
            poll_gaps: {
                let mut starts = stamps.claim_starts.lock().map(|starts| starts.clone()).unwrap_or_default();
                starts.sort_unstable();
                Summary::of(&starts.windows(2).map(|pair| pair[1] - pair[0]).collect::<Vec<_>>())
            },
        }
    }

    fn header() -> String {
        [
            "| broker | polling | wake-ups | load | events | achieved/s | publish late p99 ms | commit→ack p50 | p99 | p99.9 | max | commit→settle p50 | p99 | p99.9 | max | commit→effect p50 | p99 | p99.9 | max | claims | claim ms | send ms | settle ms | claim / send / settle max ms | poll gap p99 / max ms |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        .join("\n")
    }

    fn markdown(&self) -> String {
        let row = self.row();
        match self.per_type {
            Some((types, worst, best)) => format!(
                "{row}\n\n{types} event types: commit→ack p99 of the worst type {} ms, of the best {} ms\n",
                millis(worst),
                millis(best)
            ),
            None => row,
        }
    }

    fn row(&self) -> String {
        format!(
            "| {:?} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} / {} / {} | {} / {} |",
            self.cell.broker,
            self.cell.polling.label(),
            if self.cell.wake_ups { "on" } else { "off" },
            self.cell.load.label(),
            self.events,
            self.achieved_rate,
            millis(self.lateness_p99),
            cells(&self.ack),
            cells(&self.settle),
            cells(&self.effect),
            self.claims,
            self.claim_ms,
            self.send_ms,
            self.settle_ms,
            millis(self.maxima[0]),
            millis(self.maxima[1]),
            millis(self.maxima[2]),
            millis(self.poll_gaps.p99),
            millis(self.poll_gaps.max),
        )
    }
}
