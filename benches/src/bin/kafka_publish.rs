//! Kafka publish and drain benchmark, in one run on one broker (`ONCEBOX_KAFKA_BOOTSTRAP`) and, for
//! the drain, one PostgreSQL database (`ONCEBOX_PG_URL`):
//!
//! 1. publish: 200-byte records with `acks=all` and the idempotent producer, a batch enqueued in
//!    full and then every delivery report awaited, two ways, rounds interleaved: a raw rdkafka
//!    `FutureProducer` (key and payload only: the ceiling) and `KafkaSender::send` with the same
//!    batches (key, payload and the `oncebox_*` headers);
//! 2. drain: a backlog in PostgreSQL relayed by the engine through a `KafkaSender`, compared with
//!    the raw claim + settle loop on the same backlog (no broker) and with the raw producer's rate
//!    from phase 1: the drain cannot beat the slower of the two.
//!
//! Each phase produces to a fresh single-partition topic; the tables live under a fresh prefix and
//! are dropped at the end (the broker keeps the topics: tansu's memory storage goes with the process).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox_benches::kafka::create_topic;
use oncebox_benches::pg_backlog::{Bench, RawSql, check_drained, fast_polling, raw_loop, write_template};
use oncebox_benches::{BenchPayload, BenchResult, EVENT_TYPE, median, per_second, server_url};
use oncebox_core::config::EventSettings;
use oncebox_core::{Config, Deadline, Dialect, Engine, EngineParts, Lifecycle, OutboundMessage, Sender};
use oncebox_kafka::{KafkaSender, KafkaSenderConfig};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use uuid::Uuid;

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
    let raw_rate = publish_phase(&args, &bootstrap).await?;
    if !args.skip_drain {
        let url = server_url(PG_VARIABLE, "postgres://postgres@127.0.0.1:5432/test")?;
        drain_phase(&args, &bootstrap, url, raw_rate).await?;
    }
    Ok(())
}

fn message(topic: &str, index: u64) -> OutboundMessage {
    let id = Uuid::now_v7();
    OutboundMessage {
        id,
        event_type: EVENT_TYPE.to_owned(),
        topic: topic.to_owned(),
        key: id.to_string(),
        payload: BenchPayload::new(index).to_json(),
        payload_type: std::any::type_name::<BenchPayload>().to_owned(),
        headers: Default::default(),
        created_at: chrono::Utc::now(),
    }
}

/// The raw producer: the sender's delivery settings and nothing else.
fn raw_producer(bootstrap: &str) -> BenchResult<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
        .create()?)
}

/// Enqueues every record of `batch` (key and payload), waiting for the oldest delivery when the
/// local queue is full, then awaits every delivery report; returns how many were acknowledged.
async fn publish_raw(producer: &FutureProducer, batch: &[OutboundMessage]) -> BenchResult<u64> {
    let mut pending: std::collections::VecDeque<DeliveryFuture> = std::collections::VecDeque::new();
    let mut acknowledged = 0u64;
    for message in batch {
        loop {
            let record = FutureRecord::to(&message.topic).key(&message.key).payload(&message.payload);
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    let oldest = pending.pop_front().ok_or("queue full with nothing of ours in it")?;
                    oldest.await?.map_err(|(error, _)| error)?;
                    acknowledged += 1;
                }
                Err((error, _)) => return Err(error.into()),
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(error, _)| error)?;
        acknowledged += 1;
    }
    Ok(acknowledged)
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
    let raw = raw_producer(bootstrap)?;
    let sender = KafkaSender::new(KafkaSenderConfig::new(bootstrap))?;
    // As an engine configured with the same emergency timeout would hand it over.
    sender.adopt_emergency_timeout(DELIVERY_TIMEOUT)?;
    let batches: Vec<Vec<OutboundMessage>> = (0..args.messages.div_ceil(args.batch_size))
        .map(|batch| {
            let first = batch * args.batch_size;
            let last = (first + args.batch_size).min(args.messages);
            (first..last).map(|index| message(&topic, index as u64)).collect()
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
                acknowledged +=
                    if index == 0 { publish_raw(&raw, batch).await? } else { send(&sender, batch).await? };
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
async fn drain_phase(args: &Args, bootstrap: &str, url: String, raw_producer_rate: f64) -> BenchResult<()> {
    let bench = Bench::connect(url, "kbench_").await?;
    let outcome = drain(args, bootstrap, &bench, raw_producer_rate).await;
    let cleaned = bench.drop_everything().await;
    bench.pool.close().await;
    outcome?;
    cleaned?;
    println!("\ntables under {} dropped", bench.tables.prefix());
    Ok(())
}

/// Drains a fresh copy of the backlog with `workers` raw claim + settle loops; returns events/s.
async fn timed_raw_loop(bench: &Bench, events: u64, workers: usize, batch_size: u32) -> BenchResult<f64> {
    bench.reset_backlog(events).await?;
    let (totals, elapsed) = raw_loop(bench, RawSql::HandWritten, workers, batch_size).await?;
    check_drained(bench, "raw loop").await?;
    let rate = per_second(totals.events, elapsed);
    println!(
        "raw SQL claim + settle loop, {workers} worker(s): {} events in {:.2} s = {rate:.0} events/s",
        totals.events,
        elapsed.as_secs_f64()
    );
    Ok(rate)
}

async fn drain(args: &Args, bootstrap: &str, bench: &Bench, raw_producer_rate: f64) -> BenchResult<()> {
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

    let raw_db_rate = timed_raw_loop(bench, events, 1, batch_size).await?;
    // The engine overlaps a claim, a send and a settle, so it may use two connections at once; the
    // two-worker loop shows what the database gives two concurrent claimers.
    let raw_db_rate_2 = timed_raw_loop(bench, events, 2, batch_size).await?;

    bench.reset_backlog(events).await?;
    let topic = create_topic(bootstrap, "oncebox-bench-drain-").await?;
    let config = Config::builder()
        .table_prefix(bench.tables.prefix())
        .event(EVENT_TYPE, EventSettings::new(&topic).batch_size(batch_size).polling(fast_polling()))
        .build()?;
    let dialect = bench.instance().await?;
    let sender = KafkaSender::new(KafkaSenderConfig::new(bootstrap))?;
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(dialect.outbox_dao());
    parts.dlq = Some(dialect.dlq_dao());
    parts.inbox = Some(dialect.inbox_dao());
    parts.job_lock = Some(dialect.job_lock());
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
    check_drained(bench, "engine → KafkaSender").await?;
    let engine_rate = per_second(stats.delivered, elapsed);
    println!(
        "engine → KafkaSender, 1 instance: {} events in {:.2} s = {engine_rate:.0} events/s ({} task runs failed)",
        stats.delivered,
        elapsed.as_secs_f64(),
        stats.task_errors
    );
    let ceiling = raw_db_rate.min(raw_producer_rate);
    println!("\n| drain | events/s | ratio to min(raw DB loop, raw producer) |");
    println!("|---|---:|---:|");
    println!("| raw SQL claim + settle loop (no broker) | {raw_db_rate:.0} | {:.3} |", raw_db_rate / ceiling);
    println!(
        "| raw producer (phase 1 median) | {raw_producer_rate:.0} | {:.3} |",
        raw_producer_rate / ceiling
    );
    println!("| engine → KafkaSender | {engine_rate:.0} | {:.3} |", engine_rate / ceiling);
    println!(
        "\nraw loop with 2 workers: {raw_db_rate_2:.0} events/s; engine / that = {:.3}",
        engine_rate / raw_db_rate_2
    );
    Ok(())
}
