//! PostgreSQL relay benchmark, in one run on one database (`ONCEBOX_PG_URL`):
//!
//! 1. the raw ceiling: a hand-written claim + settle loop (no broker) draining a pre-filled
//!    backlog, with one worker and with two;
//! 2. the engine draining the same backlog into the in-memory broker, with one instance and with
//!    two, with a time breakdown (claim / send / settle) from timing decorators around the DAO and
//!    the sender;
//!    A diagnostic third drain runs the raw loop with the engine's own `claim.sql`/`settle.sql`,
//!    which separates the cost of the statements from the cost of the engine around them;
//! 3. publish overhead, interleaved: (A) a business insert, (B) A plus a hand-written outbox
//!    insert, (C) A plus `Publisher::publish` (wake-ups on, the default), (D) C with wake-ups off
//!    and (E) A plus the `PgWriter`'s UNNEST statement bound by hand; then `publish_all` of 100
//!    events against 100 single publishes in one transaction. With `--relay-while-publishing` an
//!    engine of this process relays the published events meanwhile (wake-ups on), and (F) is C
//!    through the writer whose type that engine keeps awake, so its NOTIFY is left out while the
//!    poller drains.
//!
//! Every phase starts from the same backlog (copied from a template written once through the
//! `PgWriter`) after `VACUUM ANALYZE`. All tables live under a fresh prefix and are dropped at the end.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use oncebox_benches::observe::{ObservedOutbox, OutboxObserver};
use oncebox_benches::pg_backlog::{
    Bench, ENGINE_CLAIM, ENGINE_SETTLE, PREFILL_BATCH, RawSql, check_drained, fast_polling, raw_loop,
    write_template,
};
use oncebox_benches::{
    BenchPayload, BenchResult, CountingSender, EVENT_TYPE, Summary, millis, per_second, print_ratios,
    print_variants, run_against,
};
use oncebox_core::activity::PollerActivity;
use oncebox_core::config::EventSettings;
use oncebox_core::{
    ClaimedBatch, Config, Deadline, Dialect, Engine, EngineHandle, EngineParts, Lifecycle, OutboundMessage,
    Publisher, SendError, Sender, Settlement,
};
use oncebox_postgres::{PgDialect, PgWriter};
use oncebox_testkit::MemoryBroker;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use uuid::Uuid;

const URL_VARIABLE: &str = "ONCEBOX_PG_URL";
const URL_EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/test";
const TOPIC: &str = "bench-topic";
/// Longest a drain may take before the run gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);

const BUSINESS_TABLE: &str = include_str!("../../sql/business_table.sql");
const BUSINESS_INSERT: &str = include_str!("../../sql/business_insert.sql");
const OUTBOX_INSERT_ONE: &str = include_str!("../../sql/outbox_insert_one.sql");
/// The `PgWriter`'s insert without NOTIFY, run by hand as variant E.
const WRITER_INSERT: &str = include_str!("../../../crates/oncebox-postgres/sql/insert_events.sql");

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(about = "oncebox PostgreSQL relay and publish benchmark (server address from ONCEBOX_PG_URL)")]
struct Args {
    /// Backlog size drained by each relay phase.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Rows per claim, for the raw loop and the engine.
    #[arg(long, default_value_t = 500)]
    batch_size: u32,
    /// Iterations of each single-publish variant (A, B, C, D).
    #[arg(long, default_value_t = 1_000)]
    iterations: usize,
    /// Iterations of each 100-event batch variant.
    #[arg(long, default_value_t = 100)]
    batch_iterations: usize,
    /// Times the four drains (raw and engine, one and two workers) are repeated.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Diagnostic: the engine sends to a sender that only acknowledges, instead of the
    /// in-memory broker (which keeps a copy of every message).
    #[arg(long)]
    counting_sender: bool,
    /// Skip the relay phases (raw ceiling and engine).
    #[arg(long)]
    skip_relay: bool,
    /// Skip the publish-overhead phases.
    #[arg(long)]
    skip_publish: bool,
    /// Print `EXPLAIN (ANALYZE, BUFFERS)` of the raw and the engine claim on a fresh backlog.
    #[arg(long)]
    explain: bool,
    /// Run under a `tracing` subscriber at this level (`info`, `debug`), formatting every span
    /// and event into a sink, to measure what the spans cost; without it nothing subscribes.
    #[arg(long)]
    tracing: Option<String>,
    /// Relay the published events with an engine (wake-ups on) during the publish phase, and add
    /// variant F: `Publisher::publish` through the writer that engine's pollers keep awake.
    #[arg(long)]
    relay_while_publishing: bool,
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    if let Some(level) = &args.tracing {
        let filter = tracing_subscriber::EnvFilter::try_new(level)?;
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::sink)
            .try_init()
            .map_err(|error| -> Box<dyn Error> { error })?;
    }
    run_against(URL_VARIABLE, URL_EXAMPLE, args, run)
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    if args.batch_size == 0 || args.events == 0 {
        return Err("--events and --batch-size must be at least 1".into());
    }
    let bench = Bench::connect(url, "bench_").await?;
    let pool = bench.pool.clone();
    let prefix = bench.tables.prefix().to_owned();
    print_server(&bench).await?;
    println!("table prefix: {prefix}");
    let outcome = run_phases(&bench, &args).await;
    let cleaned = bench.drop_everything().await;
    pool.close().await;
    outcome?;
    cleaned?;
    println!("\ntables under {prefix} dropped");
    Ok(())
}

async fn print_server(bench: &Bench) -> BenchResult<()> {
    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&bench.pool).await?;
    let mut settings = Vec::new();
    for name in ["shared_buffers", "synchronous_commit", "fsync", "autovacuum", "max_wal_size"] {
        let value: String =
            sqlx::query_scalar(AssertSqlSafe(format!("SHOW {name}"))).fetch_one(&bench.pool).await?;
        settings.push(format!("{name}={value}"));
    }
    println!("PostgreSQL {version}; {}", settings.join(", "));
    println!(
        "client (tokio multi-thread runtime) and server share {} CPUs",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    Ok(())
}

async fn run_phases(bench: &Bench, args: &Args) -> BenchResult<()> {
    bench.create_tables().await?;
    if !args.skip_relay {
        relay_phases(bench, args).await?;
    }
    if !args.skip_publish {
        publish_phases(bench, args).await?;
    }
    Ok(())
}

// ---- relay: raw ceiling and engine ------------------------------------------------------------

async fn relay_phases(bench: &Bench, args: &Args) -> BenchResult<()> {
    let events = args.events;
    println!(
        "\n## Relay: backlog of {events} events ({} B JSON payloads), batch {}",
        oncebox_benches::PAYLOAD_BYTES,
        args.batch_size
    );
    let started = Instant::now();
    write_template(bench, events).await?;
    let elapsed = started.elapsed();
    println!(
        "template backlog written through PgWriter, {PREFILL_BATCH} per transaction: {:.1} s ({:.0} events/s)",
        elapsed.as_secs_f64(),
        per_second(events, elapsed)
    );
    if args.explain {
        explain_claims(bench, args).await?;
    }

    let mut rows = Vec::new();
    for repetition in 1..=args.repeat {
        for workers in [1usize, 2] {
            // Odd repetitions run the raw loop first, even ones the engine, so neither always gets
            // the warmer cache. With one worker, the raw loop also runs the engine's own SQL, to
            // tell the cost of the statements from the cost of the engine around them.
            let mut order = vec![Phase::Raw(RawSql::HandWritten), Phase::Engine];
            if workers == 1 {
                order.insert(1, Phase::Raw(RawSql::Engine));
            }
            if repetition % 2 == 0 {
                order.reverse();
            }
            for phase in order {
                bench.reset_backlog(events).await?;
                let mut result = match phase {
                    Phase::Engine => engine_drain(bench, workers, args, events).await?,
                    Phase::Raw(sql) => raw_drain(bench, sql, workers, args.batch_size).await?,
                };
                check_drained(bench, &result.label).await?;
                result.repetition = repetition;
                rows.push(result);
            }
        }
    }
    rows.sort_by_key(|row| (row.repetition, row.workers, row.kind));

    println!(
        "\n| run | phase | events | seconds | events/s | ratio to raw, same run and worker count | claim ms/batch | send ms/batch | settle ms/batch | batches |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        let raw = rows
            .iter()
            .find(|raw| {
                raw.kind == Phase::Raw(RawSql::HandWritten)
                    && raw.workers == row.workers
                    && raw.repetition == row.repetition
            })
            .map(DrainResult::rate);
        let ratio = raw.map_or("-".to_owned(), |raw| format!("{:.3}", row.rate() / raw));
        let per_batch = |total: Duration| {
            if row.batches == 0 {
                "-".to_owned()
            } else {
                millis(total / u32::try_from(row.batches).unwrap_or(u32::MAX))
            }
        };
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {} | {} |",
            row.repetition,
            row.label,
            row.events,
            row.elapsed.as_secs_f64(),
            row.rate(),
            ratio,
            per_batch(row.claim),
            if row.kind == Phase::Engine { per_batch(row.send) } else { "-".to_owned() },
            per_batch(row.settle),
            row.batches
        );
    }
    println!(
        "(claim/send/settle are summed over workers and divided by batches: time inside each call, as seen by the caller)"
    );
    if args.repeat > 1 {
        println!(
            "\n| phase, over all {} runs | events/s (all events / all seconds) | ratio to raw, same worker count |",
            args.repeat
        );
        println!("|---|---:|---:|");
        let aggregate = |kind: Phase, workers: usize| {
            let (events, seconds) = rows
                .iter()
                .filter(|row| row.kind == kind && row.workers == workers)
                .fold((0u64, 0f64), |(e, t), row| (e + row.events, t + row.elapsed.as_secs_f64()));
            if seconds > 0.0 { events as f64 / seconds } else { 0.0 }
        };
        for (kind, workers, label) in [
            (Phase::Raw(RawSql::HandWritten), 1, "raw SQL loop, 1 worker"),
            (Phase::Raw(RawSql::Engine), 1, "raw loop running the engine's SQL, 1 worker"),
            (Phase::Engine, 1, "engine, 1 instance"),
            (Phase::Raw(RawSql::HandWritten), 2, "raw SQL loop, 2 workers"),
            (Phase::Engine, 2, "engine, 2 instances"),
        ] {
            let rate = aggregate(kind, workers);
            let raw = aggregate(Phase::Raw(RawSql::HandWritten), workers);
            println!("| {label} | {rate:.0} | {:.3} |", if raw > 0.0 { rate / raw } else { 0.0 });
        }
    }
    Ok(())
}

/// What drains the backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// The raw claim + settle loop.
    Raw(RawSql),
    /// The engine into the in-memory broker.
    Engine,
}

/// One drain's measurements.
struct DrainResult {
    repetition: usize,
    label: String,
    kind: Phase,
    workers: usize,
    events: u64,
    elapsed: Duration,
    batches: u64,
    claim: Duration,
    send: Duration,
    settle: Duration,
}

impl DrainResult {
    fn rate(&self) -> f64 {
        per_second(self.events, self.elapsed)
    }
}

async fn raw_drain(bench: &Bench, sql: RawSql, workers: usize, batch_size: u32) -> BenchResult<DrainResult> {
    let (totals, elapsed) = raw_loop(bench, sql, workers, batch_size, None).await?;
    let plural = if workers == 1 { "" } else { "s" };
    let result = DrainResult {
        repetition: 0,
        label: match sql {
            RawSql::HandWritten => format!("raw SQL loop, {workers} worker{plural}"),
            RawSql::Engine => {
                format!("raw loop running the engine's claim.sql/settle.sql, {workers} worker{plural}")
            }
        },
        kind: Phase::Raw(sql),
        workers,
        events: totals.events,
        elapsed,
        batches: totals.batches,
        claim: totals.claim,
        send: Duration::ZERO,
        settle: totals.settle,
    };
    println!(
        "{}: {} events in {:.2} s = {:.0} events/s",
        result.label,
        result.events,
        elapsed.as_secs_f64(),
        result.rate()
    );
    Ok(result)
}

async fn engine_drain(bench: &Bench, instances: usize, args: &Args, events: u64) -> BenchResult<DrainResult> {
    let batch_size = args.batch_size;
    let config = Config::builder()
        .table_prefix(bench.tables.prefix())
        .event(EVENT_TYPE, EventSettings::new(TOPIC).batch_size(batch_size).polling(fast_polling()))
        .build()?;
    let broker = MemoryBroker::new();
    let mut dialects = Vec::new();
    for _ in 0..instances {
        dialects.push(bench.instance().await?);
    }
    let mut running: Vec<(EngineHandle, Arc<Timings>, Arc<TimedSender>)> = Vec::new();
    let started = Instant::now();
    for dialect in &dialects {
        let timings = Arc::new(Timings::default());
        let inner: Arc<dyn Sender> =
            if args.counting_sender { Arc::new(CountingSender) } else { Arc::new(broker.clone()) };
        let sender = Arc::new(TimedSender::new(inner));
        let mut parts = EngineParts::new(config.clone());
        parts.outbox = Some(Arc::new(ObservedOutbox::new(dialect.outbox_dao(), timings.clone())));
        parts.dlq = Some(dialect.dlq_dao());
        parts.inbox = Some(dialect.inbox_dao());
        parts.job_lock = Some(dialect.job_lock());
        parts.sender = Some(sender.clone());
        running.push((Engine::start(parts)?, timings, sender));
    }
    let deadline = started + DRAIN_TIMEOUT;
    let elapsed = loop {
        let delivered: u64 = running.iter().map(|(engine, _, _)| engine.stats().delivered).sum();
        if delivered >= events {
            break started.elapsed();
        }
        if let Some((engine, _, _)) =
            running.iter().find(|(engine, _, _)| matches!(engine.state(), Lifecycle::Failed(_)))
        {
            return Err(format!("engine failed: {}", engine.state()).into());
        }
        if Instant::now() > deadline {
            return Err(
                format!("engine delivered only {delivered} of {events} within {DRAIN_TIMEOUT:?}").into()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let mut result = DrainResult {
        repetition: 0,
        label: format!(
            "engine → {}, {instances} instance{}",
            if args.counting_sender { "counting sender" } else { "MemoryBroker" },
            if instances == 1 { "" } else { "s" }
        ),
        kind: Phase::Engine,
        workers: instances,
        events: 0,
        elapsed,
        batches: 0,
        claim: Duration::ZERO,
        send: Duration::ZERO,
        settle: Duration::ZERO,
    };
    let mut task_errors = 0;
    for (engine, timings, sender) in &running {
        engine.shutdown(Duration::from_secs(30)).await?;
        let stats = engine.stats();
        result.events += stats.delivered;
        task_errors += stats.task_errors;
        result.batches += timings.settles.load(Ordering::Relaxed);
        result.claim += timings.claim_time();
        result.settle += timings.settle_time();
        result.send += sender.time();
    }
    for dialect in dialects {
        dialect.pool().close().await;
    }
    if task_errors > 0 {
        println!("warning: {task_errors} task runs failed during the drain");
    }
    println!(
        "{}: {} events in {:.2} s = {:.0} events/s ({} messages in the broker)",
        result.label,
        result.events,
        elapsed.as_secs_f64(),
        result.rate(),
        broker.delivered().len()
    );
    Ok(result)
}

/// Adds the time spent in successful claims and settles to counters.
#[derive(Default)]
struct Timings {
    claim_nanos: AtomicU64,
    settle_nanos: AtomicU64,
    settles: AtomicU64,
}

impl Timings {
    fn claim_time(&self) -> Duration {
        Duration::from_nanos(self.claim_nanos.load(Ordering::Relaxed))
    }

    fn settle_time(&self) -> Duration {
        Duration::from_nanos(self.settle_nanos.load(Ordering::Relaxed))
    }
}

fn add_elapsed(counter: &AtomicU64, elapsed: Duration) {
    counter.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

impl OutboxObserver for Timings {
    fn claimed(&self, elapsed: Duration, _: &ClaimedBatch) {
        add_elapsed(&self.claim_nanos, elapsed);
    }

    fn settled(&self, elapsed: Duration, _: &ClaimedBatch, _: &[Settlement]) {
        add_elapsed(&self.settle_nanos, elapsed);
        self.settles.fetch_add(1, Ordering::Relaxed);
    }
}

/// Adds the time spent in `send` to a counter.
struct TimedSender {
    inner: Arc<dyn Sender>,
    nanos: AtomicU64,
}

impl TimedSender {
    fn new(inner: Arc<dyn Sender>) -> Self {
        Self { inner, nanos: AtomicU64::new(0) }
    }

    fn time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

#[async_trait]
impl Sender for TimedSender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        let started = Instant::now();
        let results = self.inner.send(batch, deadline).await;
        add_elapsed(&self.nanos, started.elapsed());
        results
    }

    fn adopt_emergency_timeout(&self, timeout: Duration) -> oncebox_core::Result<()> {
        self.inner.adopt_emergency_timeout(timeout)
    }

    async fn flush(&self, timeout: Duration) -> oncebox_core::Result<()> {
        self.inner.flush(timeout).await
    }
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the first claim and its settle, for both the raw and the
/// engine statements, on a fresh backlog, each pair in a transaction that is rolled back.
async fn explain_claims(bench: &Bench, args: &Args) -> BenchResult<()> {
    let pairs = [
        ("raw", bench.raw_claim.clone(), bench.raw_settle.clone(), false),
        ("engine", bench.sql(ENGINE_CLAIM), bench.sql(ENGINE_SETTLE), true),
    ];
    for (label, claim, settle, engine) in pairs {
        bench.reset_backlog(args.events).await?;
        let mut tx = bench.pool.begin().await?;
        let token = Uuid::now_v7();
        let lines: Vec<String> =
            sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {claim}")))
                .bind(EVENT_TYPE)
                .bind(i64::from(args.batch_size))
                .bind(token)
                .fetch_all(&mut *tx)
                .await?;
        print_plan(&format!("{label} claim, first batch of a fresh backlog"), &lines);
        let ids: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT id FROM {} WHERE claim_token = $1",
            bench.tables.events()
        )))
        .bind(token)
        .fetch_all(&mut *tx)
        .await?;
        let explain = AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {settle}"));
        let lines: Vec<String> = if engine {
            let count = ids.len();
            sqlx::query_scalar(explain)
                .bind(token)
                .bind(&ids)
                .bind(vec!["PROCESSED"; count])
                .bind(vec![0i64; count])
                .bind(vec![None::<String>; count])
                .fetch_all(&mut *tx)
                .await?
        } else {
            sqlx::query_scalar(explain).bind(&ids).bind(token).fetch_all(&mut *tx).await?
        };
        print_plan(&format!("{label} settle of that batch"), &lines);
        tx.rollback().await?;
    }
    Ok(())
}

fn print_plan(title: &str, lines: &[String]) {
    println!("\n### EXPLAIN ANALYZE, {title}\n```");
    for line in lines {
        // A settle's filter spells out all 500 ids; the start of the line is what matters.
        match line.char_indices().nth(160) {
            Some((cut, _)) => println!("{} …", &line[..cut]),
            None => println!("{line}"),
        }
    }
    println!("```");
}

// ---- publish overhead -------------------------------------------------------------------------

/// The single-publish variants, run interleaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// The business insert alone.
    BusinessOnly,
    /// Plus a hand-written outbox insert.
    HandWritten,
    /// Plus the `PgWriter`'s own UNNEST statement (no NOTIFY), bound by hand.
    HandWrittenUnnest,
    /// Plus `Publisher::publish` (wake-ups on, the default).
    Publish,
    /// Plus `Publisher::publish` with wake-ups off (no NOTIFY).
    PublishNoNotify,
    /// Plus `Publisher::publish` through the writer whose type this process's relay keeps awake.
    PublishBesideRelay,
}

const VARIANTS: [Variant; 5] = [
    Variant::BusinessOnly,
    Variant::HandWritten,
    Variant::Publish,
    Variant::PublishNoNotify,
    Variant::HandWrittenUnnest,
];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::BusinessOnly => "A: business insert",
            Variant::HandWritten => "B: A + hand-written outbox INSERT",
            Variant::HandWrittenUnnest => "E: A + the PgWriter's UNNEST INSERT bound by hand",
            Variant::Publish => "C: A + Publisher::publish (wake-ups on, default)",
            Variant::PublishNoNotify => "D: A + Publisher::publish (wake-ups off)",
            Variant::PublishBesideRelay => {
                "F: C, the writer of the relaying dialect (NOTIFY left out while awake)"
            }
        }
    }
}

/// What the publish variants share.
struct PublishContext {
    business_insert: String,
    outbox_insert: String,
    writer_insert: String,
    publisher: Publisher<PgWriter>,
    quiet_publisher: Publisher<PgWriter>,
    /// The writer of the dialect the relay runs on, and its awake marks (F).
    relayed: Option<(Publisher<PgWriter>, Arc<PollerActivity>)>,
    /// F publishes that found the type awake just before writing.
    awake_publishes: AtomicU64,
}

impl PublishContext {
    async fn business_row(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        payload: &BenchPayload,
    ) -> BenchResult<()> {
        sqlx::query(AssertSqlSafe(self.business_insert.clone()))
            .bind(Uuid::now_v7())
            .bind(&payload.customer)
            .bind(i64::try_from(payload.order).unwrap_or(i64::MAX))
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn run(
        &self,
        connection: &mut PgConnection,
        variant: Variant,
        order: u64,
    ) -> BenchResult<Duration> {
        let payload = BenchPayload::new(order);
        let started = Instant::now();
        let mut tx = Connection::begin(&mut *connection).await?;
        self.business_row(&mut tx, &payload).await?;
        match variant {
            Variant::BusinessOnly => {}
            Variant::HandWritten => {
                let json = serde_json::to_string(&payload)?;
                sqlx::query(AssertSqlSafe(self.outbox_insert.clone()))
                    .bind(Uuid::now_v7())
                    .bind(EVENT_TYPE)
                    .bind(json)
                    .bind(std::any::type_name::<BenchPayload>())
                    .execute(&mut *tx)
                    .await?;
            }
            Variant::HandWrittenUnnest => {
                let json = serde_json::to_string(&payload)?;
                sqlx::query(AssertSqlSafe(self.writer_insert.clone()))
                    .bind(vec![Uuid::now_v7()])
                    .bind(vec![EVENT_TYPE])
                    .bind(vec![json])
                    .bind(vec![std::any::type_name::<BenchPayload>()])
                    .bind(vec!["{}"])
                    .bind(vec![None::<&str>])
                    .execute(&mut *tx)
                    .await?;
            }
            Variant::Publish => {
                self.publisher.publish(&mut tx, EVENT_TYPE, &payload).await?;
            }
            Variant::PublishNoNotify => {
                self.quiet_publisher.publish(&mut tx, EVENT_TYPE, &payload).await?;
            }
            Variant::PublishBesideRelay => {
                let (publisher, activity) =
                    self.relayed.as_ref().ok_or("variant F runs only beside a relay")?;
                if activity.is_awake(EVENT_TYPE) {
                    self.awake_publishes.fetch_add(1, Ordering::Relaxed);
                }
                publisher.publish(&mut tx, EVENT_TYPE, &payload).await?;
            }
        }
        tx.commit().await?;
        Ok(started.elapsed())
    }

    async fn run_batch(
        &self,
        connection: &mut PgConnection,
        batched: bool,
        order: u64,
    ) -> BenchResult<Duration> {
        let payloads: Vec<BenchPayload> = (0..100).map(|index| BenchPayload::new(order + index)).collect();
        let started = Instant::now();
        let mut tx = Connection::begin(&mut *connection).await?;
        if batched {
            self.publisher.publish_all(&mut tx, EVENT_TYPE, &payloads).await?;
        } else {
            for payload in &payloads {
                self.publisher.publish(&mut tx, EVENT_TYPE, payload).await?;
            }
        }
        tx.commit().await?;
        Ok(started.elapsed())
    }
}

/// An engine on a pool and dialect of its own, wake-ups on, relaying the published events into a
/// sender that only acknowledges, as a service's own relay would beside its request handlers.
async fn start_publish_relay(bench: &Bench) -> BenchResult<(PgDialect, EngineHandle)> {
    let dialect = bench.instance().await?.with_wake_ups(true);
    let config = Config::builder()
        .table_prefix(bench.tables.prefix())
        .event(EVENT_TYPE, EventSettings::new("bench-topic"))
        .processed_clean_up(None)
        .build()?;
    let mut parts = EngineParts::with_dialect(config, &dialect);
    parts.sender = Some(Arc::new(CountingSender));
    parts.wake_source = dialect.wake_source().await?;
    parts.activity = dialect.poller_activity();
    let engine = Engine::start(parts)?;
    Ok((dialect, engine))
}

async fn publish_phases(bench: &Bench, args: &Args) -> BenchResult<()> {
    bench.execute(&format!("TRUNCATE {}", bench.tables.events())).await?;
    bench.execute(&bench.sql(BUSINESS_TABLE)).await?;
    bench.vacuum().await?;
    let event_types = [EVENT_TYPE.to_owned()];
    // The relay's dialect has awake marks of its own: C's writer (`bench.dialect`) never sees them.
    let relay = if args.relay_while_publishing { Some(start_publish_relay(bench).await?) } else { None };
    let relayed = match &relay {
        Some((dialect, _)) => Some((
            Publisher::new(dialect.writer(), event_types.clone()),
            dialect.poller_activity().ok_or("the relay's dialect has wake-ups on")?,
        )),
        None => None,
    };
    let variants: Vec<Variant> =
        VARIANTS.iter().copied().chain(relay.is_some().then_some(Variant::PublishBesideRelay)).collect();
    let context = PublishContext {
        business_insert: bench.sql(BUSINESS_INSERT),
        outbox_insert: bench.sql(OUTBOX_INSERT_ONE),
        writer_insert: bench.sql(WRITER_INSERT),
        publisher: Publisher::new(bench.dialect.writer(), event_types.clone()),
        quiet_publisher: Publisher::new(bench.dialect.clone().with_wake_ups(false).writer(), event_types),
        relayed,
        awake_publishes: AtomicU64::new(0),
    };
    // One connection held for the whole phase, as a request handler holds one for its
    // transaction: no pool hand-over or liveness ping inside the timings.
    let mut connection = bench.pool.acquire().await?;
    let iterations = args.iterations;
    println!(
        "\n## Publish overhead: {iterations} iterations per variant, interleaved (order rotated each round), after 50 warm-up rounds"
    );
    let mut order = 0u64;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(iterations); variants.len()];
    for round in 0..(50 + iterations) {
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let elapsed = context.run(&mut connection, variants[index], order).await?;
            order += 1;
            if round >= 50 {
                samples[index].push(elapsed);
            }
        }
    }
    let summaries: Vec<Summary> = samples.iter().map(|s| Summary::of(s)).collect();
    print_variants(variants.iter().map(|variant| variant.label()), &summaries);
    let pairs = [
        ("B/A", 1, 0),
        ("C/A", 2, 0),
        ("C/B", 2, 1),
        ("D/B", 3, 1),
        ("E/B", 4, 1),
        ("D/E", 3, 4),
        ("C/D", 2, 3),
    ];
    print_ratios(&summaries, &pairs);
    // The added cost of a publish: the transaction's time beyond the business insert alone.
    let added = |index: usize, pick: fn(&Summary) -> Duration| {
        pick(&summaries[index]).as_secs_f64() - pick(&summaries[0]).as_secs_f64()
    };
    let mut added_pairs = vec![("(C−A)/(B−A)", 2), ("(D−A)/(B−A)", 3)];
    if relay.is_some() {
        added_pairs.push(("(F−A)/(B−A)", 5));
    }
    for (label, index) in added_pairs {
        println!(
            "| {label} | {:.3} | {:.3} |",
            added(index, |s| s.mean) / added(1, |s| s.mean),
            added(index, |s| s.p50) / added(1, |s| s.p50)
        );
    }
    if let Some((dialect, engine)) = relay {
        engine.shutdown(Duration::from_secs(30)).await?;
        dialect.pool().close().await;
        println!(
            "\nF found the type awake before {} of its {} publishes (warm-up included); the relay delivered {} events",
            context.awake_publishes.load(Ordering::Relaxed),
            50 + iterations,
            engine.stats().delivered
        );
    }

    let batch_iterations = args.batch_iterations;
    println!(
        "\n## Batch publish: 100 events in one transaction, {batch_iterations} iterations each, interleaved, after 5 warm-up rounds"
    );
    let mut batched = Vec::with_capacity(batch_iterations);
    let mut singles = Vec::with_capacity(batch_iterations);
    for round in 0..(5 + batch_iterations) {
        let first_batched = round % 2 == 0;
        for batched_run in [first_batched, !first_batched] {
            let elapsed = context.run_batch(&mut connection, batched_run, order).await?;
            order += 100;
            if round >= 5 {
                if batched_run { batched.push(elapsed) } else { singles.push(elapsed) }
            }
        }
    }
    let batched = Summary::of(&batched);
    let singles = Summary::of(&singles);
    println!("\n| variant | n | mean ms | p50 ms | p99 ms | µs per event (mean) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, summary) in [("publish_all(100)", batched), ("100 × publish", singles)] {
        println!(
            "| {label} | {} | {} | {} | {} | {:.1} |",
            summary.count,
            millis(summary.mean),
            millis(summary.p50),
            millis(summary.p99),
            summary.mean.as_secs_f64() * 1e6 / 100.0
        );
    }
    println!(
        "\n100 × publish / publish_all(100): {:.2}× (means), {:.2}× (p50)",
        singles.mean.as_secs_f64() / batched.mean.as_secs_f64(),
        singles.p50.as_secs_f64() / batched.p50.as_secs_f64()
    );
    Ok(())
}
