//! publish → relay → RabbitMQ → listener → inbox → effect, with the SQLite dialect and a real broker
//! (`ONCEBOX_AMQP_URL`): every committed event has its effect once, a rolled-back one never, and a
//! redelivered copy changes nothing.

mod support;

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use oncebox_core::engine::{Engine, EngineParts};
use oncebox_core::{
    Config, Consumed, Deadline, Dialect, Error, Inbox, InboxWriter, OutboundMessage, Publisher, SchemaPlan,
    Sender,
};
use oncebox_rabbit::{
    ListenerOutcome, RabbitEvent, RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig,
    RabbitTopology,
};
use oncebox_sqlite::{SqliteDialect, SqliteWriter};
use oncebox_testkit::runner::{Case, Suite, TestResult, fail, server_missing};
use oncebox_testkit::{Background, case};
use serde::{Deserialize, Serialize};
use sqlx::{Sqlite, Transaction};

use support::{amqp_url, fresh_name, raw_channel};

const EVENT_TYPE: &str = "order-created";
const EVENTS: i64 = 20;
const CONSUMER: &str = "billing";
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct OrderCreated {
    order: i64,
}

struct EndToEnd {
    url: String,
}

fn database_error(error: sqlx::Error) -> Error {
    Error::database("billing effect", false, error)
}

/// The billing consumer's handler: the inbox record and the payment row commit together.
///
/// It records the id with the writer itself instead of calling `Inbox::consume_in`: the future of
/// `consume_in` with a closure borrowing the transaction fails the `Send` check the listener needs
/// ("implementation of `AsyncFnOnce` is not general enough"), a current compiler limitation.
async fn record_payment(
    pool: sqlx::SqlitePool,
    writer: SqliteWriter,
    event: RabbitEvent<OrderCreated>,
) -> oncebox_core::Result<Consumed<()>> {
    let mut tx: Transaction<'static, Sqlite> = pool.begin().await.map_err(database_error)?;
    if !InboxWriter::record(&writer, &mut tx, CONSUMER, event.id).await? {
        return Ok(Consumed::Duplicate);
    }
    // The primary key makes a second effect for one order fail loudly.
    sqlx::query("INSERT INTO payments (order_id) VALUES (?)")
        .bind(event.payload.order)
        .execute(&mut *tx)
        .await
        .map_err(database_error)?;
    tx.commit().await.map_err(database_error)?;
    Ok(Consumed::Applied(()))
}

async fn payments(pool: &sqlx::SqlitePool) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT order_id FROM payments ORDER BY order_id").fetch_all(pool).await
}

/// Waits until the listener has declared `queue` (a passive declare on a fresh channel each time,
/// because a failed one closes its channel).
async fn await_queue(url: &str, queue: &str) -> TestResult {
    let deadline = tokio::time::Instant::now() + WAIT;
    let (_connection, _) = raw_channel(url).await.map_err(fail)?;
    loop {
        let channel = _connection.create_channel().await.map_err(fail)?;
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let name = ShortString::try_new(queue).map_err(fail)?;
        if channel.queue_declare(name, passive, FieldTable::default()).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(fail(format!("the listener never declared {queue}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn committed_events_have_their_effect_once(harness: Arc<EndToEnd>) -> TestResult {
    let exchange = fresh_name("orders");
    let queue = fresh_name("billing");
    let database = std::env::temp_dir().join(format!("{queue}.db"));
    let result = run_end_to_end(&harness.url, &exchange, &queue, &database).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.to_string_lossy()));
    }
    let (_connection, channel) = raw_channel(&harness.url).await.map_err(fail)?;
    let queue_name = ShortString::try_new(queue.as_str()).map_err(fail)?;
    channel.queue_delete(queue_name, QueueDeleteOptions::default()).await.map_err(fail)?;
    let exchange_name = ShortString::try_new(exchange.as_str()).map_err(fail)?;
    channel.exchange_delete(exchange_name, ExchangeDeleteOptions::default()).await.map_err(fail)?;
    result
}

async fn run_end_to_end(url: &str, exchange: &str, queue: &str, database: &std::path::Path) -> TestResult {
    let config = Config::from_yaml_str(&format!(
        "oncebox:\n  outbox:\n    events:\n      {EVENT_TYPE}:\n        topic: {exchange}\n        polling: {{ min-fixed-delay: 10ms, max-fixed-delay: 100ms }}\n  inbox: {{}}\n"
    ))
    .map_err(fail)?;
    let dialect = SqliteDialect::connect(&database.to_string_lossy()).await.map_err(fail)?;
    dialect
        .create_schema(SchemaPlan { outbox: true, dlq: false, inbox: true, jobs: true })
        .await
        .map_err(fail)?;
    let pool = dialect.pool().clone();
    sqlx::query("CREATE TABLE payments (order_id INTEGER PRIMARY KEY)").execute(&pool).await.map_err(fail)?;

    // Consumer side first, so the queue is bound before the relay publishes (mandatory publishing
    // would otherwise report the events unroutable and retry them later).
    let inbox = Inbox::new(CONSUMER, dialect.inbox_dao(), dialect.writer());
    let listener = {
        let (pool, writer) = (pool.clone(), dialect.writer());
        RabbitListener::builder(
            RabbitListenerConfig::new(url, queue).with_declare(RabbitTopology::new(exchange)),
        )
        .on(EVENT_TYPE, move |event: RabbitEvent<OrderCreated>| {
            record_payment(pool.clone(), writer.clone(), event)
        })
        .build()
        .map_err(fail)?
    };
    let mut outcomes = listener.outcomes();
    let listening = Background::spawn(|shutdown| async move { listener.run(shutdown).await });
    await_queue(url, queue).await?;

    let sender = RabbitSender::new(RabbitSenderConfig::new(url)).map_err(fail)?;
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(dialect.outbox_dao());
    parts.inbox = Some(dialect.inbox_dao());
    parts.job_lock = Some(dialect.job_lock());
    parts.sender = Some(Arc::new(sender));
    let engine = Engine::start(parts).map_err(fail)?;
    let publisher = Publisher::new(dialect.writer(), [EVENT_TYPE.to_owned()]);

    let mut committed = HashSet::new();
    for order in 1..=EVENTS {
        let mut tx = pool.begin().await.map_err(fail)?;
        let id = publisher.publish(&mut tx, EVENT_TYPE, &OrderCreated { order }).await.map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        committed.insert(id);
    }
    let mut tx = pool.begin().await.map_err(fail)?;
    let rolled_back =
        publisher.publish(&mut tx, EVENT_TYPE, &OrderCreated { order: 999 }).await.map_err(fail)?;
    tx.rollback().await.map_err(fail)?;

    let mut applied = HashSet::new();
    while applied.len() < committed.len() {
        match tokio::time::timeout(WAIT, outcomes.recv()).await {
            Ok(Ok(ListenerOutcome::Applied { id })) => {
                assert!(committed.contains(&id), "event {id} was never committed");
                assert!(applied.insert(id), "event {id} was applied twice");
            }
            Ok(Ok(ListenerOutcome::Duplicate { .. })) => {}
            Ok(Ok(other)) => return Err(fail(format!("unexpected outcome {other:?}"))),
            Ok(Err(error)) => return Err(fail(format!("outcomes: {error}"))),
            Err(_) => return Err(fail(format!("only {} of {EVENTS} events applied", applied.len()))),
        }
    }
    assert_eq!(payments(&pool).await.map_err(fail)?, (1..=EVENTS).collect::<Vec<_>>());
    assert!(!applied.contains(&rolled_back));
    for id in &committed {
        assert!(inbox.is_consumed(*id).await.map_err(fail)?, "event {id} is not in the inbox");
    }
    assert!(!inbox.is_consumed(rolled_back).await.map_err(fail)?);

    // A copy of a delivered event, as the relay sends it again after a lost confirm.
    let copy_id = committed.iter().next().copied().ok_or_else(|| fail("no event"))?;
    let copy = OutboundMessage {
        id: copy_id,
        event_type: EVENT_TYPE.to_owned(),
        topic: exchange.to_owned(),
        key: copy_id.to_string(),
        payload: "{\"order\":1}".to_owned(),
        payload_type: "OrderCreated".to_owned(),
        headers: oncebox_core::Headers::new(),
        created_at: chrono::Utc::now(),
    };
    let redeliverer = RabbitSender::new(RabbitSenderConfig::new(url)).map_err(fail)?;
    let results = redeliverer.send(std::slice::from_ref(&copy), Deadline::after(WAIT)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    match tokio::time::timeout(WAIT, outcomes.recv()).await {
        Ok(Ok(ListenerOutcome::Duplicate { id })) => assert_eq!(id, copy_id),
        other => return Err(fail(format!("the copy was not skipped as a duplicate: {other:?}"))),
    }
    assert_eq!(payments(&pool).await.map_err(fail)?.len(), EVENTS as usize, "the copy changed nothing");

    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    listening.stop().await?.map_err(fail)?;
    redeliverer.close().await.map_err(fail)?;
    Ok(())
}

fn cases() -> Vec<Case<EndToEnd>> {
    vec![case!("committed_events_have_their_effect_once", committed_events_have_their_effect_once)]
}

fn main() -> ExitCode {
    let Some(url) = amqp_url() else {
        return server_missing("rabbit end to end", support::URL_VARIABLE);
    };
    Suite::new().add("end_to_end", Arc::new(EndToEnd { url }), cases()).run()
}
