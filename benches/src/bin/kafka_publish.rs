//! Kafka publish and drain benchmark, in one run on one broker (`ONCEBOX_KAFKA_BOOTSTRAP`) and, for
//! the drain, one PostgreSQL database (`ONCEBOX_PG_URL`):
//!
//! 1. publish: 200-byte records with `acks=all` and the idempotent producer, a batch enqueued in
//!    full and then every delivery report awaited, two ways, rounds interleaved: a raw rdkafka
//!    `FutureProducer` (key and payload only: the ceiling) and `KafkaSender::send` with the same
//!    batches (key, payload and the `oncebox_*` headers);
//! 2. drain: a backlog in PostgreSQL relayed by the engine through a `KafkaSender` (once per
//!    `--concurrency` value), compared on the same backlog with the raw claim + settle loop (no
//!    broker), with the hand-written pipeline that produces each claimed batch with the raw
//!    producer before settling it (one and two workers: the fair ceiling), and with the raw
//!    producer's rate from phase 1.
//!
//! Each phase produces to a fresh single-partition topic; the tables live under a fresh prefix and
//! are dropped at the end (the broker keeps the topics: tansu's memory storage goes with the process).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox_benches::kafka::{RawKafkaSend, create_topic, produce_all, raw_producer};
use oncebox_benches::pg_backlog::{
    Bench, RawSend, RawSql, check_drained, fast_polling, raw_loop, write_template,
};
use oncebox_benches::{BenchResult, EVENT_TYPE, bench_message, median, per_second, server_url};
use oncebox_core::config::EventSettings;
use oncebox_core::{Config, Deadline, Engine, EngineParts, Lifecycle, OutboundMessage, Sender};
use oncebox_kafka::{KafkaSender, KafkaSenderConfig};

const KAFKA_VARIABLE: &str = "ONCEBOX_KAFKA_BOOTSTRAP";
const PG_VARIABLE: &str = "ONCEBOX_PG_URL";
/// Bound on one delivery (also the sender's emergency timeout).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a drain may take before the run gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3600);

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    about = "oncebox Kafka publish and PostgreSQL → Kafka drain benchmark (ONCEBOX_KAFKA_BOOTSTRAP, ONCEBOX_PG_URL)"
)]
struct Args {
    /// Records per publish round.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Records per batch (publish phase and the engine's claims).
    #[arg(long, default_value_t = 500)]
    batch_size: usize,
    /// Timed publish rounds per variant (after one warm-up round each).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Backlog drained from PostgreSQL.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Skip the drain phase (no PostgreSQL needed).
    #[arg(long)]
    skip_drain: bool,
    /// The engine drains once per value, with its event type's `concurrency` set to it.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    concurrency: Vec<u32>,
    /// Skip the publish phase (the drain's ratio to the raw producer is then left out).
    #[arg(long)]
    skip_publish: bool,
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let bootstrap =
        server_url(KAFKA_VARIABLE, "127.0.0.1:9092").map_err(|error| -> Box<dyn Error> { error })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args, bootstrap)).map_err(|error| -> Box<dyn Error> { error })
}

async fn run(args: Args, bootstrap: String) -> BenchResult<()> {
    if args.messages == 0 || args.batch_size == 0 || args.rounds == 0 || args.events == 0 {
        return Err("--messages, --batch-size, --rounds and --events must be at least 1".into());
    }
    println!(
        "client and broker share {} CPUs; broker at {bootstrap}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let raw_rate = if args.skip_publish { None } else { Some(publish_phase(&args, &bootstrap).await?) };
    if !args.skip_drain {
        let url = server_url(PG_VARIABLE, "postgres://postgres@127.0.0.1:5432/test")?;
        drain_phase(&args, &bootstrap, url, raw_rate).await?;
    }
    Ok(())
}

async fn send(sender: &KafkaSender, batch: &[OutboundMessage]) -> BenchResult<u64> {
    let mut acknowledged = 0;
    for result in sender.send(batch, Deadline::after(DELIVERY_TIMEOUT)).await {
        result?;
        acknowledged += 1;
    }
    Ok(acknowledged)
}

/// Phase 1; returns the raw producer's median rate.
async fn publish_phase(args: &Args, bootstrap: &str) -> BenchResult<f64> {
    let topic = create_topic(bootstrap, "oncebox-bench-publish-").await?;
    let raw = raw_producer(bootstrap, DELIVERY_TIMEOUT)?;
    let sender = KafkaSender::new(KafkaSenderConfig::new(bootstrap))?;
    // As an engine configured with the same emergency timeout would hand it over.
    sender.adopt_emergency_timeout(DELIVERY_TIMEOUT)?;
    let batches: Vec<Vec<OutboundMessage>> = (0..args.messages.div_ceil(args.batch_size))
        .map(|batch| {
            let first = batch * args.batch_size;
            let last = (first + args.batch_size).min(args.messages);
            (first..last).map(|index| bench_message(&topic, index as u64)).collect()
        })
        .collect();
    println!(
        "\n## Publish: {} records per round in batches of {}, {} B payloads, 1 warm-up + {} timed rounds per variant, interleaved, topic {topic}",
        args.messages,
        args.batch_size,
        batches.first().and_then(|batch| batch.first()).map_or(0, |message| message.payload.len()),
        args.rounds
    );
    let labels = [
        "raw rdkafka FutureProducer (key + payload)",
        "KafkaSender::send (key + payload + oncebox_* headers)",
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for round in 0..=args.rounds {
        for offset in 0..2 {
            let index = (round + offset) % 2;
            let started = Instant::now();
            let mut acknowledged = 0u64;
            for batch in &batches {
                acknowledged += if index == 0 {
                    let records =
                        batch.iter().map(|message| (message.key.as_str(), message.payload.as_str()));
                    produce_all(&raw, &topic, records).await?
                } else {
                    send(&sender, batch).await?
                };
            }
            let elapsed = started.elapsed();
            let rate = per_second(acknowledged, elapsed);
            if round > 0 {
                rates[index].push(rate);
            }
            println!(
                "round {round}{}: {:<56} {acknowledged} acknowledged in {:.3} s = {rate:.0} records/s",
                if round == 0 { " (warm-up)" } else { "" },
                labels[index],
                elapsed.as_secs_f64()
            );
        }
    }
    sender.flush(Duration::from_secs(10)).await?;
    let medians: Vec<f64> = rates.iter().map(|rates| median(rates)).collect();
    println!("\n| variant | median records/s | min | max | ratio to raw |");
    println!("|---|---:|---:|---:|---:|");
    for (index, label) in labels.iter().enumerate() {
        let low = rates[index].iter().copied().fold(f64::INFINITY, f64::min);
        let high = rates[index].iter().copied().fold(0.0, f64::max);
        println!(
            "| {label} | {:.0} | {low:.0} | {high:.0} | {:.3} |",
            medians[index],
            medians[index] / medians[0]
        );
    }
    Ok(medians[0])
}

/// Phase 2.
async fn drain_phase(
    args: &Args,
    bootstrap: &str,
    url: String,
    raw_producer_rate: Option<f64>,
) -> BenchResult<()> {
    let bench = Bench::connect(url, "kbench_").await?;
    let outcome = drain(args, bootstrap, &bench, raw_producer_rate).await;
    let cleaned = bench.drop_everything().await;
    bench.pool.close().await;
    outcome?;
    cleaned?;
    println!("\ntables under {} dropped", bench.tables.prefix());
    Ok(())
}

/// Drains a fresh copy of the backlog with `workers` raw loops, each sending every batch through
/// `send` between claim and settle when given; returns events/s.
async fn timed_raw_loop(
    bench: &Bench,
    events: u64,
    workers: usize,
    batch_size: u32,
    send: Option<Arc<dyn RawSend>>,
) -> BenchResult<f64> {
    bench.reset_backlog(events).await?;
    let label = match send {
        Some(_) => format!("raw claim → produce → settle pipeline, {workers} worker(s)"),
        None => format!("raw SQL claim + settle loop (no broker), {workers} worker(s)"),
    };
    let (totals, elapsed) = raw_loop(bench, RawSql::HandWritten, workers, batch_size, send).await?;
    check_drained(bench, &label).await?;
    let rate = per_second(totals.events, elapsed);
    println!("{label}: {} events in {:.2} s = {rate:.0} events/s", totals.events, elapsed.as_secs_f64());
    Ok(rate)
}

/// Drains a fresh copy of the backlog with one engine whose event type runs `concurrency` claim
/// loops, through a `KafkaSender` to a fresh topic; returns events/s.
async fn engine_drain(
    bench: &Bench,
    bootstrap: &str,
    events: u64,
    batch_size: u32,
    concurrency: u32,
) -> BenchResult<f64> {
    bench.reset_backlog(events).await?;
    let topic = create_topic(bootstrap, "oncebox-bench-drain-").await?;
    let settings =
        EventSettings::new(&topic).batch_size(batch_size).concurrency(concurrency).polling(fast_polling());
    let config = Config::builder().table_prefix(bench.tables.prefix()).event(EVENT_TYPE, settings).build()?;
    let dialect = bench.instance().await?;
    let sender = KafkaSender::new(KafkaSenderConfig::new(bootstrap))?;
    let mut parts = EngineParts::with_dialect(config, &dialect);
    parts.sender = Some(Arc::new(sender));
    let started = Instant::now();
    let engine = Engine::start(parts)?;
    let deadline = started + DRAIN_TIMEOUT;
    let elapsed = loop {
        let delivered = engine.stats().delivered;
        if delivered >= events {
            break started.elapsed();
        }
        if let Lifecycle::Failed(_) = engine.state() {
            return Err(format!("engine failed: {}", engine.state()).into());
        }
        if Instant::now() > deadline {
            return Err(
                format!("engine delivered only {delivered} of {events} within {DRAIN_TIMEOUT:?}").into()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    engine.shutdown(Duration::from_secs(30)).await?;
    let stats = engine.stats();
    dialect.pool().close().await;
    let label = format!("engine → KafkaSender, 1 instance, concurrency {concurrency}");
    check_drained(bench, &label).await?;
    let rate = per_second(stats.delivered, elapsed);
    println!(
        "{label}: {} events in {:.2} s = {rate:.0} events/s ({} task runs failed)",
        stats.delivered,
        elapsed.as_secs_f64(),
        stats.task_errors
    );
    Ok(rate)
}

async fn drain(
    args: &Args,
    bootstrap: &str,
    bench: &Bench,
    raw_producer_rate: Option<f64>,
) -> BenchResult<()> {
    let events = args.events;
    let batch_size = u32::try_from(args.batch_size)?;
    println!(
        "\n## Drain: backlog of {events} events ({} B JSON payloads) in PostgreSQL, batch {batch_size}, tables {}",
        oncebox_benches::PAYLOAD_BYTES,
        bench.tables.prefix()
    );
    bench.create_tables().await?;
    let started = Instant::now();
    write_template(bench, events).await?;
    println!("template backlog written in {:.1} s", started.elapsed().as_secs_f64());

    let mut rows: Vec<(String, f64)> = Vec::new();
    for workers in [1, 2] {
        let rate = timed_raw_loop(bench, events, workers, batch_size, None).await?;
        rows.push((format!("raw SQL claim + settle loop, no broker, {workers} worker(s)"), rate));
    }
    // The fair ceiling: what a hand-written relay with the same producer reaches, two workers
    // sharing one producer as one process would.
    let mut pipeline = Vec::new();
    for workers in [1, 2] {
        let send: Arc<dyn RawSend> = Arc::new(RawKafkaSend {
            producer: raw_producer(bootstrap, DELIVERY_TIMEOUT)?,
            topic: create_topic(bootstrap, "oncebox-bench-raw-drain-").await?,
        });
        let rate = timed_raw_loop(bench, events, workers, batch_size, Some(send)).await?;
        pipeline.push(rate);
        rows.push((format!("raw claim → produce → settle pipeline, {workers} worker(s)"), rate));
    }
    for &concurrency in &args.concurrency {
        let rate = engine_drain(bench, bootstrap, events, batch_size, concurrency).await?;
        rows.push((format!("**engine → KafkaSender, concurrency {concurrency}**"), rate));
    }
    println!(
        "\n| drain | events/s | ratio to the 2-worker pipeline | ratio to min(raw DB loop, raw producer) |"
    );
    println!("|---|---:|---:|---:|");
    let ceiling = raw_producer_rate.map(|producer| rows[0].1.min(producer));
    if let Some(producer) = raw_producer_rate {
        rows.insert(2, ("raw producer (publish phase median)".to_owned(), producer));
    }
    for (label, rate) in &rows {
        let to_ceiling = ceiling.map_or("-".to_owned(), |ceiling| format!("{:.3}", rate / ceiling));
        println!("| {label} | {rate:.0} | {:.3} | {to_ceiling} |", rate / pipeline[1]);
    }
    Ok(())
}
