//! Pool-sharing benchmark on PostgreSQL (`ONCEBOX_PG_URL`): does a relay draining a backlog starve
//! the application's business transactions when both use the dialect's one pool, as the README's
//! `dialect.pool().clone()` has them do?
//!
//! For every pool size (`--pool-sizes`), on one pool of that size:
//!
//! 1. baseline: `--business-tasks` tasks run `BEGIN; INSERT business row; COMMIT` in a loop, alone,
//!    for `--baseline-seconds`;
//! 2. for every `--thread-pool-sizes` value: the same business load while an engine with that
//!    `thread-pool-size` drains a backlog of `--events` events spread over `--event-types` event
//!    types on the same pool, sending to a sender that only acknowledges (the broker is never the
//!    bottleneck). The business load runs from the engine's start until the backlog is delivered;
//! 3. with `--separate-pool`, the same drains once more with the relay on a pool of its own (the
//!    default size, `DEFAULT_MAX_CONNECTIONS`), as the control: what is left is contention for the
//!    server and the CPUs, not for the pool's connections.
//!
//! Each business transaction records how long `pool.acquire()` waited for a connection, how long
//! `BEGIN` to the end of `COMMIT` took on that connection, and the whole transaction, acquire to
//! commit. The run prints their p50/p99/max, the drain rate and the most outbox statements the
//! relay had in flight at once. All tables live under a fresh prefix and are dropped at the end.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox_benches::observe::{ObservedOutbox, OutboxObserver};
use oncebox_benches::pg_backlog::{Bench, check_drained, fast_polling, write_template_of_types};
use oncebox_benches::{BenchPayload, BenchResult, CountingSender, Summary, millis, per_second, run_against};
use oncebox_core::config::EventSettings;
use oncebox_core::{Config, Dialect, Engine, EngineParts, Lifecycle};
use oncebox_postgres::{DEFAULT_MAX_CONNECTIONS, PgDialect};
use sqlx::{AssertSqlSafe, Connection, PgPool};
use uuid::Uuid;

const URL_VARIABLE: &str = "ONCEBOX_PG_URL";
const URL_EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/test";
const TOPIC: &str = "bench-topic";
/// Longest a drain may take before the run gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often the drain's progress is checked.
const SAMPLE_EVERY: Duration = Duration::from_millis(2);

const BUSINESS_TABLE: &str = include_str!("../../sql/business_table.sql");
const BUSINESS_INSERT: &str = include_str!("../../sql/business_insert.sql");

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    about = "oncebox PostgreSQL pool-sharing benchmark: business transactions while the relay drains on the same pool (server address from ONCEBOX_PG_URL)"
)]
struct Args {
    /// Backlog size drained by each relay phase.
    #[arg(long, default_value_t = 200_000)]
    events: u64,
    /// Event types the backlog is spread over (round-robin), one poller each.
    #[arg(long, default_value_t = 10)]
    event_types: usize,
    /// Rows per claim.
    #[arg(long, default_value_t = 500)]
    batch_size: u32,
    /// Relay `thread-pool-size` values, one drain each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10")]
    thread_pool_sizes: Vec<usize>,
    /// Pool sizes (max connections) shared by the relay and the business load.
    #[arg(long, value_delimiter = ',', default_value = "10,20")]
    pool_sizes: Vec<u32>,
    /// Concurrent business tasks.
    #[arg(long, default_value_t = 4)]
    business_tasks: usize,
    /// Pause of each business task between two transactions, in milliseconds.
    #[arg(long, default_value_t = 0)]
    business_pause_ms: u64,
    /// How long the baseline (business load alone) runs for each pool size.
    #[arg(long, default_value_t = 10)]
    baseline_seconds: u64,
    /// Also drain with the relay on a pool of its own (the control), for the first pool size.
    #[arg(long)]
    separate_pool: bool,
}

fn main() -> Result<(), Box<dyn Error>> {
    run_against(URL_VARIABLE, URL_EXAMPLE, Args::parse(), run)
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    if args.events == 0
        || args.batch_size == 0
        || args.event_types == 0
        || args.business_tasks == 0
        || args.thread_pool_sizes.contains(&0)
        || args.pool_sizes.contains(&0)
    {
        return Err("--events, --event-types, --batch-size, --business-tasks, every --thread-pool-sizes and every --pool-sizes value must be at least 1".into());
    }
    let bench = Bench::connect(url, "bench_").await?;
    let prefix = bench.tables.prefix().to_owned();
    println!("table prefix: {prefix}");
    let outcome = run_phases(&bench, &args).await;
    let cleaned = bench.drop_everything().await;
    bench.pool.close().await;
    outcome?;
    cleaned?;
    println!("\ntables under {prefix} dropped");
    Ok(())
}

async fn run_phases(bench: &Bench, args: &Args) -> BenchResult<()> {
    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&bench.pool).await?;
    let max_connections: String = sqlx::query_scalar("SHOW max_connections").fetch_one(&bench.pool).await?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let default_threads = Config::builder().table_prefix(bench.tables.prefix()).build()?.thread_pool_size;
    println!("PostgreSQL {version}, max_connections={max_connections}; client and server share {cpus} CPUs");
    println!(
        "defaults: pool {DEFAULT_MAX_CONNECTIONS} connections (DEFAULT_MAX_CONNECTIONS), thread-pool-size {default_threads} on this machine"
    );

    bench.create_tables().await?;
    bench.execute(&bench.sql(BUSINESS_TABLE)).await?;
    let event_types: Vec<String> =
        (0..args.event_types).map(|index| format!("bench-event-{index}")).collect();
    let started = Instant::now();
    write_template_of_types(bench, args.events, &event_types).await?;
    println!(
        "template backlog: {} events over {} event types, written in {:.1} s",
        args.events,
        event_types.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "business load: {} tasks, BEGIN; INSERT one row; COMMIT, {} ms pause between transactions",
        args.business_tasks, args.business_pause_ms
    );

    let mut rows = Vec::new();
    for &pool_size in &args.pool_sizes {
        let dialect = bench.instance_with_pool_size(pool_size).await?;
        warm_up(dialect.pool(), pool_size).await?;
        let business = BusinessLoad::start(dialect.pool(), bench, args);
        tokio::time::sleep(Duration::from_secs(args.baseline_seconds)).await;
        let (samples, elapsed) = business.stop().await?;
        let row = Row { pool_size, relay: None, business: samples, elapsed };
        row.print_progress();
        rows.push(row);
        let separate = if args.separate_pool && Some(&pool_size) == args.pool_sizes.first() {
            let relay = bench.instance().await?;
            warm_up(relay.pool(), DEFAULT_MAX_CONNECTIONS).await?;
            Some(relay)
        } else {
            None
        };
        for &threads in &args.thread_pool_sizes {
            let relays =
                std::iter::once((&dialect, true)).chain(separate.as_ref().map(|relay| (relay, false)));
            for (relay, shared) in relays {
                bench.reset_backlog(args.events).await?;
                let drain = Drain { relay, shared, event_types: &event_types, threads };
                let row = drain_with_business_load(bench, dialect.pool(), drain, args).await?;
                check_drained(bench, &row.label()).await?;
                row.print_progress();
                rows.push(row);
            }
        }
        if let Some(relay) = separate {
            relay.pool().close().await;
        }
        dialect.pool().close().await;
    }
    print_table(&rows, default_threads);
    Ok(())
}

/// Opens every connection of the pool once, so no phase pays for connecting.
async fn warm_up(pool: &PgPool, pool_size: u32) -> BenchResult<()> {
    let mut held = Vec::new();
    for _ in 0..pool_size {
        held.push(pool.acquire().await?);
    }
    drop(held);
    Ok(())
}

/// Which relay drains, and how.
struct Drain<'a> {
    /// The relay's dialect and pool.
    relay: &'a PgDialect,
    /// Whether that pool is the business load's.
    shared: bool,
    /// The event types of the backlog, one poller each.
    event_types: &'a [String],
    /// The relay's `thread-pool-size`.
    threads: usize,
}

/// Drains the backlog with `drain.relay` while the business load runs on `business_pool`.
async fn drain_with_business_load(
    bench: &Bench,
    business_pool: &PgPool,
    drain: Drain<'_>,
    args: &Args,
) -> BenchResult<Row> {
    let Drain { relay, shared, event_types, threads } = drain;
    let mut config = Config::builder().table_prefix(bench.tables.prefix()).thread_pool_size(threads);
    for event_type in event_types {
        config = config
            .event(event_type, EventSettings::new(TOPIC).batch_size(args.batch_size).polling(fast_polling()));
    }
    let in_flight = Arc::new(InFlight::default());
    let mut parts = EngineParts::new(config.build()?);
    parts.outbox = Some(Arc::new(ObservedOutbox::new(relay.outbox_dao(), in_flight.clone())));
    parts.dlq = Some(relay.dlq_dao());
    parts.inbox = Some(relay.inbox_dao());
    parts.job_lock = Some(relay.job_lock());
    parts.sender = Some(Arc::new(CountingSender));

    let started = Instant::now();
    let engine = Engine::start(parts)?;
    let business = BusinessLoad::start(business_pool, bench, args);
    let deadline = started + DRAIN_TIMEOUT;
    let drain_time = loop {
        if engine.stats().delivered >= args.events {
            break started.elapsed();
        }
        if let Lifecycle::Failed(reason) = engine.state() {
            return Err(format!("engine failed: {reason}").into());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "engine delivered only {} of {} within {DRAIN_TIMEOUT:?}",
                engine.stats().delivered,
                args.events
            )
            .into());
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    };
    let (samples, elapsed) = business.stop().await?;
    engine.shutdown(Duration::from_secs(30)).await?;
    let stats = engine.stats();
    Ok(Row {
        pool_size: business_pool.options().get_max_connections(),
        relay: Some(RelayResult {
            threads,
            shared,
            delivered: stats.delivered,
            drain_time,
            task_errors: stats.task_errors,
            statements_max: in_flight.max.load(Ordering::Relaxed),
        }),
        business: samples,
        elapsed,
    })
}

// ---- business load --------------------------------------------------------------------------------

/// What the business tasks measured.
#[derive(Default)]
struct BusinessSamples {
    /// Time `pool.acquire()` waited, per committed transaction.
    acquire: Vec<Duration>,
    /// `BEGIN` to the end of `COMMIT` on the acquired connection, per committed transaction.
    statements: Vec<Duration>,
    /// Acquire to the end of `COMMIT`, per committed transaction.
    transaction: Vec<Duration>,
    /// Acquires that ended with the pool's acquire timeout.
    timeouts: u64,
}

/// Business tasks running until stopped.
struct BusinessLoad {
    stop: Arc<AtomicBool>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<BenchResult<BusinessSamples>>>,
}

impl BusinessLoad {
    fn start(pool: &PgPool, bench: &Bench, args: &Args) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let insert = bench.sql(BUSINESS_INSERT);
        let pause = Duration::from_millis(args.business_pause_ms);
        let tasks = (0..args.business_tasks)
            .map(|task| {
                let worker = BusinessWorker {
                    pool: pool.clone(),
                    insert: insert.clone(),
                    stop: stop.clone(),
                    pause,
                    first_order: task as u64 * 1_000_000_000,
                };
                tokio::spawn(worker.run())
            })
            .collect();
        Self { stop, started: Instant::now(), tasks }
    }

    /// Stops the tasks after their current transaction; returns their samples and the time they ran.
    async fn stop(self) -> BenchResult<(BusinessSamples, Duration)> {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.started.elapsed();
        let mut all = BusinessSamples::default();
        for task in self.tasks {
            let samples = task.await??;
            all.acquire.extend(samples.acquire);
            all.statements.extend(samples.statements);
            all.transaction.extend(samples.transaction);
            all.timeouts += samples.timeouts;
        }
        Ok((all, elapsed))
    }
}

/// One business task: `BEGIN; INSERT one row; COMMIT` in a loop.
struct BusinessWorker {
    pool: PgPool,
    insert: String,
    stop: Arc<AtomicBool>,
    pause: Duration,
    first_order: u64,
}

impl BusinessWorker {
    async fn run(self) -> BenchResult<BusinessSamples> {
        let mut samples = BusinessSamples::default();
        let mut order = self.first_order;
        while !self.stop.load(Ordering::Relaxed) {
            let payload = BenchPayload::new(order);
            order += 1;
            let started = Instant::now();
            let mut connection = match self.pool.acquire().await {
                Ok(connection) => connection,
                Err(sqlx::Error::PoolTimedOut) => {
                    samples.timeouts += 1;
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let acquired = started.elapsed();
            let begun = Instant::now();
            let mut tx = Connection::begin(&mut *connection).await?;
            sqlx::query(AssertSqlSafe(self.insert.clone()))
                .bind(Uuid::now_v7())
                .bind(&payload.customer)
                .bind(i64::try_from(payload.order).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            samples.statements.push(begun.elapsed());
            samples.transaction.push(started.elapsed());
            samples.acquire.push(acquired);
            drop(connection);
            if !self.pause.is_zero() {
                tokio::time::sleep(self.pause).await;
            }
        }
        Ok(samples)
    }
}

// ---- results --------------------------------------------------------------------------------------

/// The relay's side of one drain.
struct RelayResult {
    threads: usize,
    /// Whether the relay used the business load's pool (false: the control on a pool of its own).
    shared: bool,
    delivered: u64,
    drain_time: Duration,
    task_errors: u64,
    /// Most outbox statements (claim, settle, recovery, clean-up) in flight at once.
    statements_max: usize,
}

/// One phase: the business load alone (`relay: None`) or beside a drain.
struct Row {
    pool_size: u32,
    relay: Option<RelayResult>,
    business: BusinessSamples,
    elapsed: Duration,
}

impl Row {
    fn label(&self) -> String {
        match &self.relay {
            None => format!("pool {}, business alone", self.pool_size),
            Some(relay) => format!(
                "pool {}, relay thread-pool-size {}{}",
                self.pool_size,
                relay.threads,
                if relay.shared { "" } else { " on its own pool" }
            ),
        }
    }

    fn print_progress(&self) {
        let acquire = Summary::of(&self.business.acquire);
        let relay = match &self.relay {
            None => String::new(),
            Some(relay) => format!(
                "; drained {} events in {:.2} s = {:.0} events/s",
                relay.delivered,
                relay.drain_time.as_secs_f64(),
                per_second(relay.delivered, relay.drain_time)
            ),
        };
        println!(
            "{}: {} business transactions, acquire p99 {} ms{relay}",
            self.label(),
            acquire.count,
            millis(acquire.p99)
        );
    }
}

fn print_table(rows: &[Row], default_threads: usize) {
    println!(
        "\n| business pool | relay thread-pool-size | relay pool | business txs | txs/s | acquire p50 ms | acquire p99 ms | acquire max ms | BEGIN→COMMIT p50 ms | BEGIN→COMMIT p99 ms | tx p50 ms | tx p99 ms | tx max ms | acquire timeouts | drain events/s | relay statements in flight, max |"
    );
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let acquire = Summary::of(&row.business.acquire);
        let statements = Summary::of(&row.business.statements);
        let transaction = Summary::of(&row.business.transaction);
        let (threads, relay_pool, rate, in_flight) = match &row.relay {
            None => ("none (baseline)".to_owned(), "–".to_owned(), "–".to_owned(), "–".to_owned()),
            Some(relay) => (
                if relay.threads == default_threads {
                    format!("{} (default here)", relay.threads)
                } else {
                    relay.threads.to_string()
                },
                if relay.shared { "shared".to_owned() } else { format!("own, {DEFAULT_MAX_CONNECTIONS}") },
                format!("{:.0}", per_second(relay.delivered, relay.drain_time)),
                relay.statements_max.to_string(),
            ),
        };
        println!(
            "| {} | {threads} | {relay_pool} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {rate} | {in_flight} |",
            row.pool_size,
            acquire.count,
            per_second(acquire.count as u64, row.elapsed),
            millis(acquire.p50),
            millis(acquire.p99),
            millis(acquire.max),
            millis(statements.p50),
            millis(statements.p99),
            millis(transaction.p50),
            millis(transaction.p99),
            millis(transaction.max),
            row.business.timeouts,
        );
    }
    let errors: u64 = rows.iter().filter_map(|row| row.relay.as_ref()).map(|relay| relay.task_errors).sum();
    if errors > 0 {
        println!("warning: {errors} relay task runs failed during the drains");
    }
}

// ---- relay instrumentation ------------------------------------------------------------------------

/// Counts the outbox statements in flight and keeps the maximum.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl OutboxObserver for InFlight {
    fn started(&self) {
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(now, Ordering::Relaxed);
    }

    fn finished(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }
}
