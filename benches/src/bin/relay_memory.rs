//! Relay memory benchmark: the resident set of a process whose engine drains a PostgreSQL
//! backlog (`ONCEBOX_PG_URL`) into RabbitMQ (`ONCEBOX_AMQP_URL`) or into a sender that only
//! acknowledges.
//!
//! The backlog is written by the server alone (`INSERT … SELECT generate_series`), so this
//! process never held it: every `--large-every`-th event carries a `--large-bytes` payload, the
//! others 200-byte JSON. After the set-up the peak resident set is reset
//! (`/proc/self/clear_refs`), the engine drains the backlog, the resident set is sampled every
//! 50 ms, and the peak is read at the end. RabbitMQ gets a fresh exchange and a queue bound to it
//! that keeps only its newest 1,000 messages, so the broker does not keep the whole backlog; the
//! queue and the exchange are deleted at the end, the tables dropped.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use oncebox_benches::pg_backlog::{Bench, check_drained, fast_polling};
use oncebox_benches::process::{mib, peak_rss, reset_peak_rss, rss};
use oncebox_benches::rabbit::Topology;
use oncebox_benches::{BenchResult, CountingSender, EVENT_TYPE, per_second, run_against, server_url};
use oncebox_core::config::EventSettings;
use oncebox_core::{Config, Engine, EngineParts, Lifecycle, Sender};
use oncebox_rabbit::{RabbitSender, RabbitSenderConfig};
use sqlx::AssertSqlSafe;

/// The topic when nothing is sent to a broker.
const TOPIC: &str = "bench-topic";
const SEED: &str = include_str!("../../sql/seed_backlog.sql");
/// Rows per seeding statement.
const SEED_CHUNK: u64 = 100_000;
/// Messages the bench queue keeps (the newest; older ones are dropped by the broker).
const QUEUE_LENGTH: i64 = 1_000;
/// Longest a drain may take before the run gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where the engine sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// A `RabbitSender` with publisher confirms (`ONCEBOX_AMQP_URL`).
    Rabbit,
    /// A sender that acknowledges every message and keeps nothing.
    None,
}

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    about = "oncebox relay memory benchmark (ONCEBOX_PG_URL, and ONCEBOX_AMQP_URL for --broker rabbit)"
)]
struct Args {
    /// Events in the backlog.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Every n-th event carries a large payload (0: none; 100: 1 %).
    #[arg(long, default_value_t = 0)]
    large_every: u64,
    /// Size of a large payload in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    large_bytes: u64,
    /// Rows per claim.
    #[arg(long, default_value_t = 500)]
    batch_size: u32,
    /// Claim loops of the event type.
    #[arg(long, default_value_t = 1)]
    concurrency: u32,
    /// Where the engine sends.
    #[arg(long, value_enum, default_value_t = Target::Rabbit)]
    broker: Target,
}

fn main() -> Result<(), Box<dyn Error>> {
    run_against("ONCEBOX_PG_URL", "postgres://postgres@127.0.0.1:5432/test", Args::parse(), run)
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    if args.events == 0 || args.batch_size == 0 || args.large_bytes < 16 {
        return Err("--events and --batch-size must be at least 1, --large-bytes at least 16".into());
    }
    let bench = Bench::connect(url, "mbench_").await?;
    let outcome = measure(&bench, &args).await;
    let cleaned = bench.drop_everything().await;
    bench.pool.close().await;
    outcome?;
    cleaned?;
    println!("tables under {} dropped", bench.tables.prefix());
    Ok(())
}

/// The RabbitMQ side of a run: the sender and the objects to delete afterwards.
struct Rabbit {
    connection: lapin::Connection,
    channel: lapin::Channel,
    topology: Topology,
}

async fn measure(bench: &Bench, args: &Args) -> BenchResult<()> {
    bench.create_tables().await?;
    let started = Instant::now();
    seed(bench, args).await?;
    let large = args.events.checked_div(args.large_every).unwrap_or(0);
    println!(
        "backlog: {} events, {large} of them with {} B payloads, the rest 200 B; written by the server in {:.1} s",
        args.events,
        args.large_bytes,
        started.elapsed().as_secs_f64()
    );
    let (sender, topic, rabbit): (Arc<dyn Sender>, String, Option<Rabbit>) = match args.broker {
        Target::None => (Arc::new(CountingSender), TOPIC.to_owned(), None),
        Target::Rabbit => {
            let address = server_url("ONCEBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")?;
            let connection =
                lapin::Connection::connect(&address, lapin::ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            let topology = Topology::fresh();
            let mut arguments = FieldTable::default();
            arguments.insert(ShortString::from("x-max-length"), AMQPValue::LongLongInt(QUEUE_LENGTH));
            topology.declare_with(&channel, &[EVENT_TYPE.to_owned()], arguments).await?;
            let sender = RabbitSender::new(RabbitSenderConfig::new(address))?;
            sender.connect().await?;
            let exchange = topology.exchange.clone();
            (Arc::new(sender), exchange, Some(Rabbit { connection, channel, topology }))
        }
    };
    let outcome = drain(bench, args, sender, &topic).await;
    if let Some(Rabbit { connection, channel, topology }) = rabbit {
        topology.clean_up(&channel).await?;
        connection.close(200, ShortString::from("benchmark done")).await?;
    }
    outcome
}

async fn seed(bench: &Bench, args: &Args) -> BenchResult<()> {
    let sql = bench.sql(SEED);
    let mut first = 1u64;
    while first <= args.events {
        let last = (first + SEED_CHUNK - 1).min(args.events);
        sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(i64::try_from(first)?)
            .bind(i64::try_from(last)?)
            .bind(i64::try_from(args.large_every)?)
            .bind(i64::try_from(args.large_bytes)?)
            .bind(EVENT_TYPE)
            .execute(&bench.pool)
            .await?;
        first = last + 1;
    }
    bench.vacuum().await
}

async fn drain(bench: &Bench, args: &Args, sender: Arc<dyn Sender>, topic: &str) -> BenchResult<()> {
    let settings = EventSettings::new(topic)
        .batch_size(args.batch_size)
        .concurrency(args.concurrency)
        .polling(fast_polling());
    let config = Config::builder().table_prefix(bench.tables.prefix()).event(EVENT_TYPE, settings).build()?;
    let dialect = bench.instance().await?;
    let mut parts = EngineParts::with_dialect(config, &dialect);
    parts.sender = Some(sender);

    let reset = reset_peak_rss();
    let before = rss().ok_or("no /proc/self/status: this benchmark reads Linux's process memory")?;
    let started = Instant::now();
    let engine = Engine::start(parts)?;
    let deadline = started + DRAIN_TIMEOUT;
    let mut samples = Vec::new();
    let elapsed = loop {
        samples.push(rss().unwrap_or_default());
        let delivered = engine.stats().delivered;
        if delivered >= args.events {
            break started.elapsed();
        }
        if let Lifecycle::Failed(_) = engine.state() {
            return Err(format!("engine failed: {}", engine.state()).into());
        }
        if Instant::now() > deadline {
            return Err(
                format!("delivered only {delivered} of {} within {DRAIN_TIMEOUT:?}", args.events).into()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let peak = peak_rss().unwrap_or_default();
    engine.shutdown(Duration::from_secs(30)).await?;
    let stats = engine.stats();
    dialect.pool().close().await;
    check_drained(bench, "engine").await?;
    samples.sort_unstable();
    let median = samples.get(samples.len() / 2).copied().unwrap_or_default();
    let largest_payload = if args.large_every == 0 { 200 } else { args.large_bytes };
    println!(
        "engine → {:?}, batch {}, concurrency {}: {} events in {:.1} s = {:.0} events/s ({} task runs failed)",
        args.broker,
        args.batch_size,
        args.concurrency,
        stats.delivered,
        elapsed.as_secs_f64(),
        per_second(stats.delivered, elapsed),
        stats.task_errors
    );
    println!(
        "\n| RSS before the engine started | median while draining | peak while draining | batch × largest payload |"
    );
    println!("|---:|---:|---:|---:|");
    println!(
        "| {} MiB | {} MiB | {} MiB{} | {} MiB |",
        mib(before),
        mib(median),
        mib(peak),
        if reset { "" } else { " (peak since the process started: clear_refs refused)" },
        mib(u64::from(args.batch_size) * largest_payload)
    );
    Ok(())
}
