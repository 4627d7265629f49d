//! Inbox consume benchmark (`ONCEBOX_AMQP_URL`, `ONCEBOX_PG_URL`): a queue of messages applied on
//! PostgreSQL, each effect one row of an `effects` table written in the transaction that records
//! the event as consumed, four ways in one run on one broker and one database, rounds interleaved:
//!
//! * **hand-written, ids only**: a lapin consumer: begin → insert the id into an inbox table
//!   (skipping a known one) → insert the effect → commit → ack, one message at a time and then
//!   `in-flight` at once;
//! * **`RabbitListener` + `on_in`**: the same through oncebox's listener and ids-only inbox, one at
//!   a time and then `with_concurrency(in-flight)`;
//! * **hand-written, store then process**: a lapin consumer inserts each message into a table of
//!   its own and acks it, `in-flight` at once; beside it one loop claims up to `batch` stored rows
//!   (`FOR UPDATE SKIP LOCKED`, marked under a token) and runs `concurrency` of them at once, each
//!   in its own transaction: insert the effect → mark the row processed (fenced by the token) →
//!   commit;
//! * **durable inbox**: `RabbitListener::store_in` with `with_concurrency(in-flight)` and a
//!   `StoredProcessor` with `on_in`, the same batch and concurrency.
//!
//! A round publishes the messages with `RabbitSender`, then starts the consumer and times until
//! the last effect row is there. The binaries measure; they assert nothing.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use oncebox::config::Backoff;
use oncebox::consume::EventHeaders;
use oncebox::postgres::PgDialect;
use oncebox::stored::{StoredEvent, StoredInbox, StoredInboxSettings};
use oncebox::{Dialect, Inbox, SchemaPlan, TableNames};
use oncebox_benches::rabbit::Topology;
use oncebox_benches::{
    BenchResult, EVENT_TYPE, bench_message, fresh_name, median, per_second, run_against, server_url,
};
use oncebox_core::{Deadline, Sender};
use oncebox_rabbit::{RabbitEvent, RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig};
use oncebox_testkit::Background;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

const URL_VARIABLE: &str = "ONCEBOX_AMQP_URL";
const URL_EXAMPLE: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(about = "oncebox inbox consume benchmark (ONCEBOX_AMQP_URL and ONCEBOX_PG_URL)")]
struct Args {
    /// Messages per round.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Stored rows one claim takes (store-then-process variants).
    #[arg(long, default_value_t = 32)]
    batch: u32,
    /// Handlers running at once (store-then-process variants).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Messages the consumers handle at once (the hand-written ones, and the listeners with
    /// `with_concurrency`).
    #[arg(long, default_value_t = 8)]
    in_flight: u16,
    /// Timed rounds per variant.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    RawIds,
    ListenerIds,
    RawIdsInFlight,
    ListenerIdsInFlight,
    RawStored,
    Durable,
}

impl Variant {
    const ALL: [Variant; 6] = [
        Variant::RawIds,
        Variant::ListenerIds,
        Variant::RawIdsInFlight,
        Variant::ListenerIdsInFlight,
        Variant::RawStored,
        Variant::Durable,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::RawIds => "hand-written, ids only, one at a time",
            Variant::ListenerIds => "RabbitListener + on_in, one at a time",
            Variant::RawIdsInFlight => "hand-written, ids only, in-flight at once",
            Variant::ListenerIdsInFlight => "RabbitListener + on_in, with_concurrency(in-flight)",
            Variant::RawStored => "hand-written, store then process",
            Variant::Durable => "durable inbox: store_in + StoredProcessor::on_in",
        }
    }
}

/// The tables and queue of one round.
struct Round {
    dialect: PgDialect,
    prefix: String,
    topology: Topology,
}

impl Round {
    fn effects(&self) -> String {
        format!("{}effects", self.prefix)
    }

    fn raw_inbox(&self) -> String {
        format!("{}raw_inbox", self.prefix)
    }

    fn pool(&self) -> &PgPool {
        self.dialect.pool()
    }

    async fn execute(&self, sql: String) -> BenchResult<()> {
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(self.pool()).await?;
        Ok(())
    }

    async fn effect_count(&self) -> BenchResult<i64> {
        let sql = format!("SELECT COUNT(*) FROM {}", self.effects());
        Ok(sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(self.pool()).await?)
    }

    /// Waits until every message has its effect; the time from `started`.
    async fn until_applied(&self, messages: usize, started: Instant) -> BenchResult<Duration> {
        let deadline = started + Duration::from_secs(600);
        loop {
            if usize::try_from(self.effect_count().await?).unwrap_or(0) >= messages {
                return Ok(started.elapsed());
            }
            if Instant::now() > deadline {
                return Err("the round did not finish within 10 minutes".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    run_against(URL_VARIABLE, URL_EXAMPLE, args, run)
}

async fn run(args: Args, amqp_url: String) -> BenchResult<()> {
    let pg_url = server_url("ONCEBOX_PG_URL", "postgres://postgres@127.0.0.1:5432/test")?;
    let connection = Connection::connect(&amqp_url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let sender = RabbitSender::new(RabbitSenderConfig::new(amqp_url.clone()))?;
    println!(
        "{} messages a round, {} rounds; in flight {}; store-then-process: batch {}, concurrency {}",
        args.messages, args.rounds, args.in_flight, args.batch, args.concurrency
    );
    let mut rates: Vec<(Variant, Vec<f64>)> =
        Variant::ALL.iter().map(|variant| (*variant, Vec::new())).collect();
    for round in 0..args.rounds {
        for (variant, rates) in &mut rates {
            let prefix = format!("{}_", fresh_name("b"));
            let tables = TableNames::with_prefix(&prefix)?;
            let dialect = PgDialect::connect(&pg_url).await?.with_tables(&tables);
            dialect.create_schema(SchemaPlan { inbox: true, ..SchemaPlan::default() }).await?;
            let topology = Topology::fresh();
            topology.declare(&channel, &[EVENT_TYPE.to_owned()]).await?;
            let round_tables = Round { dialect, prefix, topology };
            round_tables
                .execute(format!(
                    "CREATE TABLE {} (event_id UUID PRIMARY KEY, payload TEXT NOT NULL);
                     CREATE TABLE {} (consumer TEXT NOT NULL, id UUID NOT NULL, payload BYTEA NOT NULL,
                         status TEXT NOT NULL, claim_token UUID, received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                         PRIMARY KEY (consumer, id));",
                    round_tables.effects(),
                    round_tables.raw_inbox()
                ))
                .await?;
            publish(&sender, &round_tables.topology.exchange, args.messages).await?;
            let elapsed = match variant {
                Variant::RawIds => raw_ids(&amqp_url, &round_tables, args.messages, 1).await?,
                Variant::ListenerIds => listener_ids(&amqp_url, &round_tables, args.messages, 1).await?,
                Variant::RawIdsInFlight => {
                    raw_ids(&amqp_url, &round_tables, args.messages, args.in_flight).await?
                }
                Variant::ListenerIdsInFlight => {
                    listener_ids(&amqp_url, &round_tables, args.messages, args.in_flight).await?
                }
                Variant::RawStored => raw_stored(&amqp_url, &round_tables, &args).await?,
                Variant::Durable => durable(&amqp_url, &round_tables, &args).await?,
            };
            let rate = per_second(args.messages as u64, elapsed);
            println!(
                "round {round}: {:<52} {:>8.0} events/s ({:.1} s)",
                variant.name(),
                rate,
                elapsed.as_secs_f64()
            );
            rates.push(rate);
            channel
                .queue_purge(
                    ShortString::from(round_tables.topology.queue.as_str()),
                    QueuePurgeOptions::default(),
                )
                .await?;
            round_tables.topology.clean_up(&channel).await?;
            round_tables
                .execute(format!(
                    "DROP TABLE IF EXISTS {}, {}, {}, {}",
                    round_tables.effects(),
                    round_tables.raw_inbox(),
                    round_tables.dialect.tables().inbox(),
                    round_tables.dialect.tables().consumed()
                ))
                .await?;
        }
    }
    println!("\n| variant | events/s (median of {}) |\n|---|---|", args.rounds);
    for (variant, rates) in &rates {
        println!("| {} | {:.0} |", variant.name(), median(rates));
    }
    Ok(())
}

async fn publish(sender: &RabbitSender, exchange: &str, messages: usize) -> BenchResult<()> {
    let all: Vec<_> = (0..messages as u64).map(|index| bench_message(exchange, index)).collect();
    for batch in all.chunks(500) {
        for result in sender.send(batch, Deadline::after(Duration::from_secs(30))).await {
            result.map_err(|error| format!("publishing: {error}"))?;
        }
    }
    Ok(())
}

/// A raw consumer of `queue` with `prefetch` messages in flight.
async fn raw_consumer(
    url: &str,
    queue: &str,
    prefetch: u16,
) -> BenchResult<(Connection, Channel, lapin::Consumer)> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
    let consumer = channel
        .basic_consume(
            ShortString::from(queue),
            ShortString::from(fresh_name("bench-consumer").as_str()),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((connection, channel, consumer))
}

/// The event id of a delivery, as oncebox's sender wrote it.
fn event_id(delivery: &lapin::message::Delivery) -> BenchResult<Uuid> {
    let headers = delivery.properties.headers().as_ref().ok_or("a delivery without headers")?;
    let entries = headers.inner().iter().map(|(name, value)| {
        let text = match value {
            AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
            _ => None,
        };
        (name.as_str(), text)
    });
    Ok(EventHeaders::decode("a delivery", entries)?.id)
}

async fn raw_ids(url: &str, round: &Round, messages: usize, in_flight: u16) -> BenchResult<Duration> {
    let (_connection, _channel, consumer) = raw_consumer(url, &round.topology.queue, in_flight).await?;
    let record = format!(
        "INSERT INTO {} (consumer, id, consumed_at) VALUES ('raw', $1, now()) ON CONFLICT DO NOTHING",
        round.dialect.tables().consumed()
    );
    let effect = format!("INSERT INTO {} (event_id, payload) VALUES ($1, $2)", round.effects());
    let started = Instant::now();
    let mut handled = consumer
        .take(messages)
        .map(|delivery| {
            let (record, effect) = (record.clone(), effect.clone());
            async move {
                let delivery = delivery?;
                let id = event_id(&delivery)?;
                let mut tx = round.pool().begin().await?;
                let new =
                    sqlx::query(AssertSqlSafe(record)).bind(id).execute(&mut *tx).await?.rows_affected() == 1;
                if new {
                    let payload = String::from_utf8_lossy(&delivery.data).into_owned();
                    sqlx::query(AssertSqlSafe(effect)).bind(id).bind(payload).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                delivery.ack(BasicAckOptions::default()).await?;
                BenchResult::Ok(())
            }
        })
        .buffer_unordered(usize::from(in_flight.max(1)));
    while let Some(result) = handled.next().await {
        result?;
    }
    round.until_applied(messages, started).await
}

/// The effect of the oncebox variants: the row `effect` inserts, in the handler's transaction.
async fn write_effect(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    effect: &str,
    id: Uuid,
    payload: &serde_json::Value,
) -> Result<(), oncebox::BoxError> {
    sqlx::query(AssertSqlSafe(effect.to_owned()))
        .bind(id)
        .bind(payload.to_string())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn listener_ids(url: &str, round: &Round, messages: usize, in_flight: u16) -> BenchResult<Duration> {
    let effect: Arc<str> =
        format!("INSERT INTO {} (event_id, payload) VALUES ($1, $2)", round.effects()).into();
    let inbox = Inbox::new("listener", round.dialect.inbox_dao(), round.dialect.writer());
    let config =
        RabbitListenerConfig::new(url.to_owned(), round.topology.queue.clone()).with_concurrency(in_flight);
    let listener = RabbitListener::builder(config)
        .on_in(EVENT_TYPE, inbox, round.dialect.clone(), move |tx, event: RabbitEvent<serde_json::Value>| {
            let effect = effect.clone();
            Box::pin(async move { write_effect(tx, &effect, event.id, &event.payload).await })
        })
        .build()?;
    let started = Instant::now();
    let running = Background::spawn(|shutdown| async move { listener.run(shutdown).await });
    let elapsed = round.until_applied(messages, started).await;
    running.stop().await.map_err(|failed| format!("{failed:?}"))??;
    elapsed
}

async fn raw_stored(url: &str, round: &Round, args: &Args) -> BenchResult<Duration> {
    let (_connection, _channel, consumer) = raw_consumer(url, &round.topology.queue, args.in_flight).await?;
    let store = format!(
        "INSERT INTO {} (consumer, id, payload, status) VALUES ('raw', $1, $2, 'RECEIVED') ON CONFLICT DO NOTHING",
        round.raw_inbox()
    );
    let pool = round.pool().clone();
    let started = Instant::now();
    let messages = args.messages;
    let in_flight = usize::from(args.in_flight.max(1));
    let storing = tokio::spawn(async move {
        let mut stored = consumer
            .take(messages)
            .map(|delivery| {
                let (store, pool) = (store.clone(), pool.clone());
                async move {
                    let delivery = delivery?;
                    let id = event_id(&delivery)?;
                    sqlx::query(AssertSqlSafe(store)).bind(id).bind(&delivery.data).execute(&pool).await?;
                    delivery.ack(BasicAckOptions::default()).await?;
                    BenchResult::Ok(())
                }
            })
            .buffer_unordered(in_flight);
        while let Some(result) = stored.next().await {
            result?;
        }
        BenchResult::Ok(())
    });
    let claim = format!(
        "UPDATE {inbox} SET status = 'PROCESSING', claim_token = $1 WHERE (consumer, id) IN (
             SELECT consumer, id FROM {inbox} WHERE consumer = 'raw' AND status = 'RECEIVED'
             ORDER BY received_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
         RETURNING id, payload",
        inbox = round.raw_inbox()
    );
    let effect = format!("INSERT INTO {} (event_id, payload) VALUES ($1, $2)", round.effects());
    let settle = format!(
        "UPDATE {} SET status = 'PROCESSED', claim_token = NULL WHERE consumer = 'raw' AND id = $1 AND claim_token = $2",
        round.raw_inbox()
    );
    let mut applied = 0;
    while applied < args.messages {
        let token = Uuid::now_v7();
        let rows: Vec<(Uuid, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(claim.clone()))
            .bind(token)
            .bind(i64::from(args.batch))
            .fetch_all(round.pool())
            .await?;
        if rows.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let results: Vec<BenchResult<()>> = futures::stream::iter(rows)
            .map(|(id, payload)| {
                let (effect, settle) = (effect.clone(), settle.clone());
                async move {
                    let mut tx = round.pool().begin().await?;
                    let payload = String::from_utf8_lossy(&payload).into_owned();
                    sqlx::query(AssertSqlSafe(effect)).bind(id).bind(payload).execute(&mut *tx).await?;
                    sqlx::query(AssertSqlSafe(settle)).bind(id).bind(token).execute(&mut *tx).await?;
                    tx.commit().await?;
                    Ok(())
                }
            })
            .buffer_unordered(args.concurrency)
            .collect()
            .await;
        for result in results {
            result?;
            applied += 1;
        }
    }
    storing.await??;
    round.until_applied(args.messages, started).await
}

async fn durable(url: &str, round: &Round, args: &Args) -> BenchResult<Duration> {
    let inbox =
        StoredInbox::new("durable", round.dialect.stored_inbox_dao()).with_settings(StoredInboxSettings {
            batch_size: args.batch,
            concurrency: args.concurrency,
            poll_interval: Duration::from_millis(50),
            backoff: Backoff {
                enabled: true,
                delay: Duration::from_millis(100),
                multiplier: 2.0,
                max_delay: Duration::from_secs(1),
                jitter: 0.0,
            },
            ..StoredInboxSettings::default()
        })?;
    let effect: Arc<str> =
        format!("INSERT INTO {} (event_id, payload) VALUES ($1, $2)", round.effects()).into();
    let started = Instant::now();
    let processing = inbox
        .processor()
        .on_in(EVENT_TYPE, round.dialect.clone(), move |tx, event: StoredEvent<serde_json::Value>| {
            let effect = effect.clone();
            Box::pin(async move { write_effect(tx, &effect, event.id, &event.payload).await })
        })
        .start()?;
    let config = RabbitListenerConfig::new(url.to_owned(), round.topology.queue.clone())
        .with_concurrency(args.in_flight);
    let listener = RabbitListener::builder(config).store_in([EVENT_TYPE], &inbox).build()?;
    let running = Background::spawn(|shutdown| async move { listener.run(shutdown).await });
    let elapsed = round.until_applied(args.messages, started).await;
    running.stop().await.map_err(|failed| format!("{failed:?}"))??;
    processing.shutdown(Duration::from_secs(10)).await;
    elapsed
}
