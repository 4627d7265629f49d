//! RabbitMQ publish benchmark (`ONCEBOX_AMQP_URL`): confirmed, mandatory, persistent publishing of
//! 200-byte messages, a batch published pipelined and then every confirm awaited, three ways in one
//! run on one broker, rounds interleaved:
//!
//! * raw lapin with only `delivery-mode 2` set (the ceiling);
//! * raw lapin with the same properties and headers the `RabbitSender` sets (content type,
//!   message id, timestamp, type, `oncebox_*` headers), to separate the cost of the metadata from
//!   the cost of the sender;
//! * `RabbitSender::send` with the same batches.
//!
//! A fresh direct exchange and a durable queue bound to it are declared for the run; the queue is
//! purged after every round and both are deleted at the end.

use std::error::Error;
use std::time::{Duration, Instant};

use clap::Parser;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use oncebox_benches::rabbit::Topology;
use oncebox_benches::{BenchResult, EVENT_TYPE, bench_message, median, per_second, run_against};
use oncebox_core::{Deadline, OutboundMessage, Sender};
use oncebox_rabbit::{RabbitSender, RabbitSenderConfig};

const URL_VARIABLE: &str = "ONCEBOX_AMQP_URL";
const URL_EXAMPLE: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(about = "oncebox RabbitMQ confirmed-publish benchmark (broker address from ONCEBOX_AMQP_URL)")]
struct Args {
    /// Messages per round.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Messages per batch (published pipelined, then all confirms awaited).
    #[arg(long, default_value_t = 500)]
    batch_size: usize,
    /// Timed rounds per variant (after one warm-up round each).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn main() -> Result<(), Box<dyn Error>> {
    run_against(URL_VARIABLE, URL_EXAMPLE, Args::parse(), run)
}

/// The ways of publishing compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    RawMinimal,
    RawSameProperties,
    Sender,
}

const VARIANTS: [Variant; 3] = [Variant::RawMinimal, Variant::RawSameProperties, Variant::Sender];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::RawMinimal => "raw lapin, delivery-mode only",
            Variant::RawSameProperties => "raw lapin, RabbitSender's properties + headers",
            Variant::Sender => "RabbitSender::send",
        }
    }
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    if args.messages == 0 || args.batch_size == 0 || args.rounds == 0 {
        return Err("--messages, --batch-size and --rounds must be at least 1".into());
    }
    let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
    let admin = connection.create_channel().await?;
    let topology = Topology::fresh();
    topology.declare(&admin, &[EVENT_TYPE.to_owned()]).await?;
    println!(
        "exchange {}, durable queue {} (broker version: see `rabbitmqctl version`)",
        topology.exchange, topology.queue
    );
    let outcome = measure(&args, &url, &connection, &admin, &topology).await;
    let cleaned = topology.clean_up(&admin).await;
    let _ = connection.close(200, ShortString::from("benchmark done")).await;
    outcome?;
    cleaned?;
    println!("\nexchange and queue deleted");
    Ok(())
}

async fn measure(
    args: &Args,
    url: &str,
    connection: &Connection,
    admin: &Channel,
    topology: &Topology,
) -> BenchResult<()> {
    let raw = connection.create_channel().await?;
    raw.confirm_select(ConfirmSelectOptions::default()).await?;
    let sender = RabbitSender::new(RabbitSenderConfig::new(url))?;
    sender.connect().await?;

    let batches: Vec<Vec<OutboundMessage>> = (0..args.messages.div_ceil(args.batch_size))
        .map(|batch| {
            let first = batch * args.batch_size;
            let last = (first + args.batch_size).min(args.messages);
            (first..last).map(|index| bench_message(&topology.exchange, index as u64)).collect()
        })
        .collect();
    println!(
        "{} messages per round in batches of {}, {} B payloads, 1 warm-up + {} timed rounds per variant, interleaved",
        args.messages,
        args.batch_size,
        batches.first().and_then(|batch| batch.first()).map_or(0, |message| message.payload.len()),
        args.rounds
    );

    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..=args.rounds {
        for offset in 0..VARIANTS.len() {
            let index = (round + offset) % VARIANTS.len();
            let variant = VARIANTS[index];
            let started = Instant::now();
            let mut confirmed = 0u64;
            for batch in &batches {
                confirmed += match variant {
                    Variant::RawMinimal => publish_raw(&raw, batch, false).await?,
                    Variant::RawSameProperties => publish_raw(&raw, batch, true).await?,
                    Variant::Sender => send(&sender, batch).await?,
                };
            }
            let elapsed = started.elapsed();
            let purged = admin
                .queue_purge(ShortString::from(topology.queue.as_str()), QueuePurgeOptions::default())
                .await?;
            if u64::from(purged) != confirmed {
                return Err(
                    format!("{}: {confirmed} confirmed but {purged} in the queue", variant.label()).into()
                );
            }
            let rate = per_second(confirmed, elapsed);
            if round > 0 {
                rates[index].push(rate);
            }
            println!(
                "round {round}{}: {:<48} {confirmed} confirmed in {:.3} s = {rate:.0} msg/s",
                if round == 0 { " (warm-up)" } else { "" },
                variant.label(),
                elapsed.as_secs_f64()
            );
        }
    }
    sender.close().await?;

    let medians: Vec<f64> = rates.iter().map(|rates| median(rates)).collect();
    println!("\n| variant | median msg/s | min | max | ratio to raw (delivery-mode only) |");
    println!("|---|---:|---:|---:|---:|");
    for (index, variant) in VARIANTS.iter().enumerate() {
        let low = rates[index].iter().copied().fold(f64::INFINITY, f64::min);
        let high = rates[index].iter().copied().fold(0.0, f64::max);
        println!(
            "| {} | {:.0} | {low:.0} | {high:.0} | {:.3} |",
            variant.label(),
            medians[index],
            medians[index] / medians[0]
        );
    }
    println!("\nRabbitSender / raw with the same properties: {:.3}", medians[2] / medians[1]);
    Ok(())
}

/// The properties `RabbitSender` sets, built the same way (per message, inside the timed loop).
fn full_properties(message: &OutboundMessage) -> BenchResult<BasicProperties> {
    let mut headers = FieldTable::default();
    for (name, value) in message.wire_headers() {
        headers.insert(ShortString::try_new(name)?, AMQPValue::LongString(LongString::from(value)));
    }
    Ok(BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type(ShortString::from("application/json"))
        .with_message_id(ShortString::try_new(message.id.to_string())?)
        .with_timestamp(u64::try_from(message.created_at.timestamp()).unwrap_or(0))
        .with_type(ShortString::try_new(message.payload_type.as_str())?)
        .with_headers(headers))
}

/// Publishes `batch` without waiting in between, then awaits every confirm; returns how many
/// were acknowledged and routed.
async fn publish_raw(
    channel: &Channel,
    batch: &[OutboundMessage],
    same_properties: bool,
) -> BenchResult<u64> {
    let options = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
    let mut confirms = Vec::with_capacity(batch.len());
    for message in batch {
        let properties = if same_properties {
            full_properties(message)?
        } else {
            BasicProperties::default().with_delivery_mode(2)
        };
        let confirm = channel
            .basic_publish(
                ShortString::from(message.topic.as_str()),
                ShortString::from(message.event_type.as_str()),
                options,
                message.payload.as_bytes(),
                properties,
            )
            .await?;
        confirms.push(confirm);
    }
    let mut confirmed = 0;
    for confirm in confirms {
        match confirm.await? {
            Confirmation::Ack(None) => confirmed += 1,
            other => return Err(format!("unexpected confirmation {other:?}").into()),
        }
    }
    Ok(confirmed)
}

async fn send(sender: &RabbitSender, batch: &[OutboundMessage]) -> BenchResult<u64> {
    let mut confirmed = 0;
    for result in sender.send(batch, Deadline::after(Duration::from_secs(60))).await {
        result?;
        confirmed += 1;
    }
    Ok(confirmed)
}
