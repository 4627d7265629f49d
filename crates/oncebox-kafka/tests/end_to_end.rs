//! publish → relay → Kafka → listener → inbox → effect, with PostgreSQL (`ONCEBOX_PG_URL`) and a
//! Kafka-protocol broker (`ONCEBOX_KAFKA_BOOTSTRAP`, default `127.0.0.1:9092` under `CI=true`):
//! every committed event has its effect once and a rolled-back one never; rewinding the group to
//! the beginning changes nothing; and a broker frozen for 10 s mid-run (a private tansu process,
//! stopped with SIGSTOP) delays events without losing or doubling any.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::TcpListener;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::engine::{Engine, EngineParts};
use oncebox_core::{Config, Consumed, Dialect, Error, Inbox, InboxWriter, Publisher, SchemaPlan, TableNames};
use oncebox_kafka::{
    KafkaEvent, KafkaListener, KafkaListenerConfig, KafkaOutcome, KafkaSender, KafkaSenderConfig,
};
use oncebox_postgres::{PgDialect, PgWriter};
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail, server_missing};
use oncebox_testkit::{Background, case};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

use support::{create_topics, fresh_name, plumbing};

const EVENT_TYPE: &str = "order-created";
const CONSUMER: &str = "billing";
const PG_VARIABLE: &str = "ONCEBOX_PG_URL";
/// How long to wait for the expected accounting before giving up.
const WAIT: Duration = Duration::from_secs(120);
/// How long the private broker stays frozen.
const OUTAGE: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct OrderCreated {
    order: i64,
}

struct EndToEnd {
    bootstrap: String,
    pg_url: String,
}

fn database_error(error: sqlx::Error) -> Error {
    Error::database("billing effect", false, error)
}

/// A fresh table prefix in the shared `test` database.
fn random_prefix() -> String {
    format!("k_{}_", &Uuid::new_v4().simple().to_string()[..10])
}

/// The outbox, inbox and payment tables of one test, dropped at the end.
struct Database {
    dialect: PgDialect,
    payments: String,
}

impl Database {
    async fn create(url: &str) -> Result<Self, Failed> {
        let prefix = random_prefix();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(oncebox_postgres::connect_options(url).map_err(fail)?)
            .await
            .map_err(fail)?;
        let dialect = PgDialect::new(pool).with_tables(&TableNames::with_prefix(&prefix).map_err(fail)?);
        dialect
            .create_schema(SchemaPlan { outbox: true, dlq: false, inbox: true, jobs: true })
            .await
            .map_err(fail)?;
        let payments = format!("{prefix}payments");
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE TABLE {payments} (order_id BIGINT PRIMARY KEY)")))
            .execute(dialect.pool())
            .await
            .map_err(fail)?;
        Ok(Self { dialect, payments })
    }

    fn pool(&self) -> &PgPool {
        self.dialect.pool()
    }

    async fn payments(&self) -> Result<Vec<i64>, Failed> {
        sqlx::query_scalar(AssertSqlSafe(format!("SELECT order_id FROM {} ORDER BY order_id", self.payments)))
            .fetch_all(self.pool())
            .await
            .map_err(fail)
    }

    /// Outbox rows by status, to explain a run that gave up waiting.
    async fn statuses(&self) -> Result<Vec<(String, i64, Option<String>)>, Failed> {
        let sql = format!(
            "SELECT status, count(*), max(last_error) FROM {} GROUP BY status ORDER BY status",
            self.dialect.tables().events()
        );
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(self.pool()).await.map_err(fail)
    }

    async fn drop_tables(&self) -> TestResult {
        let tables = self.dialect.tables();
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}, {}",
            tables.events(),
            tables.dlq(),
            tables.consumed(),
            tables.inbox(),
            tables.jobs(),
            self.payments
        );
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(self.pool()).await.map_err(fail)?;
        Ok(())
    }
}

/// The billing consumer's handler: the inbox record and the payment row commit together.
///
/// It records the id with the writer itself instead of calling `Inbox::consume_in`: the future of
/// `consume_in` with a closure borrowing the transaction fails the `Send` check the listener needs,
/// a current compiler limitation.
async fn record_payment(
    pool: PgPool,
    writer: PgWriter,
    payments: Arc<str>,
    event: KafkaEvent<OrderCreated>,
) -> oncebox_core::Result<Consumed<()>> {
    let mut tx: Transaction<'static, Postgres> = pool.begin().await.map_err(database_error)?;
    if !InboxWriter::record(&writer, &mut tx, CONSUMER, event.id).await? {
        return Ok(Consumed::Duplicate);
    }
    // The primary key makes a second effect for one order fail loudly.
    sqlx::query(AssertSqlSafe(format!("INSERT INTO {payments} (order_id) VALUES ($1)")))
        .bind(event.payload.order)
        .execute(&mut *tx)
        .await
        .map_err(database_error)?;
    tx.commit().await.map_err(database_error)?;
    Ok(Consumed::Applied(()))
}

/// A running listener and the outcomes it reports.
struct Listening {
    outcomes: broadcast::Receiver<KafkaOutcome>,
    running: Background<oncebox_core::Result<()>>,
}

impl Listening {
    fn start(database: &Database, bootstrap: &str, group: &str, topic: &str) -> Result<Self, Failed> {
        let (pool, writer) = (database.pool().clone(), database.dialect.writer());
        let payments: Arc<str> = Arc::from(database.payments.as_str());
        let config = KafkaListenerConfig::new(bootstrap, group, [topic.to_owned()])
            .with_retry_backoff(Duration::from_millis(50), Duration::from_secs(1));
        let listener = KafkaListener::builder(config)
            .on(EVENT_TYPE, move |event: KafkaEvent<OrderCreated>| {
                record_payment(pool.clone(), writer.clone(), payments.clone(), event)
            })
            .build()
            .map_err(fail)?;
        let outcomes = listener.outcomes();
        let running = Background::spawn(|shutdown| async move { listener.run(shutdown).await });
        Ok(Self { outcomes, running })
    }

    /// Reads outcomes until `expected` ids were each seen as `wanted` (applied or duplicate);
    /// returns how often each id was applied.
    async fn await_all(
        &mut self,
        expected: &HashSet<Uuid>,
        duplicates: bool,
    ) -> Result<HashMap<Uuid, usize>, Failed> {
        let mut applied: HashMap<Uuid, usize> = HashMap::new();
        let mut seen: HashSet<Uuid> = HashSet::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !expected.is_subset(&seen) {
            match tokio::time::timeout_at(deadline, self.outcomes.recv()).await {
                Ok(Ok(KafkaOutcome::Applied { id })) => {
                    *applied.entry(id).or_default() += 1;
                    if !duplicates {
                        seen.insert(id);
                    }
                }
                Ok(Ok(KafkaOutcome::Duplicate { id })) => {
                    if duplicates {
                        seen.insert(id);
                    }
                }
                // A failed effect (e.g. the database busy) is retried by the listener.
                Ok(Ok(KafkaOutcome::Retrying { .. })) => {}
                Ok(Ok(other)) => return Err(fail(format!("unexpected outcome {other:?}"))),
                Ok(Err(error)) => return Err(fail(format!("outcomes: {error}"))),
                Err(_) => {
                    let missing = expected.difference(&seen).count();
                    return Err(fail(format!(
                        "gave up waiting after {WAIT:?}: {missing} of {} events not seen",
                        expected.len()
                    )));
                }
            }
        }
        Ok(applied)
    }

    async fn stop(self) -> TestResult {
        self.running.stop().await?.map_err(fail)
    }
}

/// The engine relaying `EVENT_TYPE` to `topic` through a `KafkaSender` at `bootstrap`.
fn start_engine(
    database: &Database,
    bootstrap: &str,
    topic: &str,
) -> Result<oncebox_core::engine::EngineHandle, Failed> {
    let config = Config::from_yaml_str(&format!(
        "oncebox:
  outbox:
    sender: {{ emergency-timeout: 3s }}
    events:
      {EVENT_TYPE}:
        topic: {topic}
        batch-size: 50
        max-retries: 1000
        backoff: {{ delay: 100ms, multiplier: 2, max-delay: 1s }}
        polling: {{ min-fixed-delay: 10ms, max-fixed-delay: 100ms }}
  inbox: {{}}
"
    ))
    .map_err(fail)?;
    let sender = KafkaSender::new(KafkaSenderConfig::new(bootstrap)).map_err(fail)?;
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(database.dialect.outbox_dao());
    parts.inbox = Some(database.dialect.inbox_dao());
    parts.job_lock = Some(database.dialect.job_lock());
    parts.sender = Some(Arc::new(sender));
    Engine::start(parts).map_err(fail)
}

/// Publishes orders `orders` in one committed transaction each; returns their ids by order.
async fn publish_committed(
    database: &Database,
    publisher: &Publisher<PgWriter>,
    orders: std::ops::RangeInclusive<i64>,
) -> Result<BTreeMap<i64, Uuid>, Failed> {
    let mut ids = BTreeMap::new();
    for order in orders {
        let mut tx = database.pool().begin().await.map_err(fail)?;
        let id = publisher.publish(&mut tx, EVENT_TYPE, &OrderCreated { order }).await.map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        ids.insert(order, id);
    }
    Ok(ids)
}

/// Publishes `order` in a transaction that is rolled back; returns the id it would have had.
async fn publish_rolled_back(
    database: &Database,
    publisher: &Publisher<PgWriter>,
    order: i64,
) -> Result<Uuid, Failed> {
    let mut tx = database.pool().begin().await.map_err(fail)?;
    let id = publisher.publish(&mut tx, EVENT_TYPE, &OrderCreated { order }).await.map_err(fail)?;
    tx.rollback().await.map_err(fail)?;
    Ok(id)
}

/// Commits offset 0 for `group` on partition 0 of `topic`: the group's next consumer starts at the
/// beginning, as after an operator's offset reset.
fn rewind_group(bootstrap: &str, group: &str, topic: &str) -> TestResult {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(fail)?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Offset(0)).map_err(fail)?;
    consumer.commit(&list, CommitMode::Sync).map_err(fail)?;
    let committed = support::committed_offset(bootstrap, group, topic).map_err(fail)?;
    if committed != Some(0) {
        return Err(fail(format!("the group's offset was not reset: {committed:?}")));
    }
    Ok(())
}

async fn committed_events_have_their_effect_once_and_a_rewind_changes_nothing(
    harness: Arc<EndToEnd>,
) -> TestResult {
    let database = Database::create(&harness.pg_url).await?;
    let result = run_committed_once(&harness, &database).await;
    database.drop_tables().await?;
    result
}

async fn run_committed_once(harness: &EndToEnd, database: &Database) -> TestResult {
    const EVENTS: i64 = 60;
    let topic = fresh_name("orders");
    let group = fresh_name("billing");
    create_topics(&harness.bootstrap, &[&topic]).await.map_err(fail)?;
    let mut listening = Listening::start(database, &harness.bootstrap, &group, &topic)?;
    let engine = start_engine(database, &harness.bootstrap, &topic)?;
    let publisher = Publisher::new(database.dialect.writer(), [EVENT_TYPE.to_owned()]);

    let mut committed = publish_committed(database, &publisher, 1..=EVENTS / 2).await?;
    let mut rolled_back = vec![publish_rolled_back(database, &publisher, 1001).await?];
    committed.extend(publish_committed(database, &publisher, EVENTS / 2 + 1..=EVENTS).await?);
    rolled_back.push(publish_rolled_back(database, &publisher, 1002).await?);

    let expected: HashSet<Uuid> = committed.values().copied().collect();
    let applied = listening.await_all(&expected, false).await?;
    for (id, count) in &applied {
        assert!(expected.contains(id), "event {id} was applied but never committed");
        assert_eq!(*count, 1, "event {id} was applied {count} times");
    }
    assert_eq!(database.payments().await?, (1..=EVENTS).collect::<Vec<_>>());
    let inbox = Inbox::new(CONSUMER, database.dialect.inbox_dao(), ());
    for id in &expected {
        assert!(inbox.is_consumed(*id).await.map_err(fail)?, "event {id} is not in the inbox");
    }
    for id in &rolled_back {
        assert!(!applied.contains_key(id), "rolled-back event {id} had an effect");
        assert!(!inbox.is_consumed(*id).await.map_err(fail)?);
    }
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    listening.stop().await?;

    // Every record again, from the start of the topic, for the same group.
    rewind_group(&harness.bootstrap, &group, &topic)?;
    let mut again = Listening::start(database, &harness.bootstrap, &group, &topic)?;
    let reapplied = again.await_all(&expected, true).await?;
    again.stop().await?;
    assert!(reapplied.is_empty(), "redelivered records had an effect again: {reapplied:?}");
    assert_eq!(database.payments().await?.len(), EVENTS as usize, "the redelivery changed nothing");
    Ok(())
}

/// A private tansu broker on a free port, killed on drop (after a SIGCONT, should a test fail
/// while it is stopped).
struct PrivateBroker {
    child: Child,
    bootstrap: String,
}

fn free_port() -> Result<u16, Failed> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(fail)?;
    Ok(listener.local_addr().map_err(fail)?.port())
}

fn signal(pid: u32, name: &str) -> TestResult {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().map_err(fail)?;
    if !status.success() {
        return Err(fail(format!("kill -{name} {pid} failed: {status}")));
    }
    Ok(())
}

impl PrivateBroker {
    /// Starts `tansu` from the PATH; `Ok(None)` when it is not installed (outside CI).
    async fn start() -> Result<Option<Self>, Failed> {
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("oncebox-tansu-{port}.log"));
        let log = std::fs::File::create(&log).map_err(fail)?;
        let spawned = Command::new("tansu")
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(fail)?))
            .stderr(Stdio::from(log))
            .env("RUST_LOG", "warn")
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if oncebox_testkit::runner::in_ci() {
                    return Err(fail(
                        "`tansu` is not on the PATH, and CI=true requires the broker-outage test",
                    ));
                }
                return Ok(None);
            }
            Err(error) => return Err(fail(format!("starting tansu: {error}"))),
        };
        let broker = Self { child, bootstrap: format!("127.0.0.1:{port}") };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if tokio::time::Instant::now() >= deadline {
                return Err(fail("gave up waiting: the private tansu never listened"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Some(broker))
    }

    fn freeze(&self) -> TestResult {
        signal(self.child.id(), "STOP")
    }

    fn thaw(&self) -> TestResult {
        signal(self.child.id(), "CONT")
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn events_published_while_the_broker_is_frozen_are_delivered_once(
    harness: Arc<EndToEnd>,
) -> TestResult {
    let Some(broker) = PrivateBroker::start().await? else {
        eprintln!("SKIPPED: broker outage: `tansu` is not on the PATH");
        return Ok(());
    };
    let database = Database::create(&harness.pg_url).await?;
    let result = run_outage(&broker, &database).await;
    database.drop_tables().await?;
    drop(broker);
    result
}

async fn run_outage(broker: &PrivateBroker, database: &Database) -> TestResult {
    const PER_PHASE: i64 = 20;
    let topic = fresh_name("orders");
    let group = fresh_name("billing");
    create_topics(&broker.bootstrap, &[&topic]).await.map_err(plumbing_failed)?;
    let mut listening = Listening::start(database, &broker.bootstrap, &group, &topic)?;
    let engine = start_engine(database, &broker.bootstrap, &topic)?;
    let publisher = Publisher::new(database.dialect.writer(), [EVENT_TYPE.to_owned()]);

    // Before the outage: delivered and applied.
    let mut committed = publish_committed(database, &publisher, 1..=PER_PHASE).await?;
    let before: HashSet<Uuid> = committed.values().copied().collect();
    let mut applied = listening.await_all(&before, false).await?;

    // During: published (and relayed, failing) while the broker cannot answer.
    broker.freeze()?;
    let frozen = tokio::time::Instant::now();
    let mut during = BTreeMap::new();
    for order in PER_PHASE + 1..=2 * PER_PHASE {
        during.extend(publish_committed(database, &publisher, order..=order).await?);
        tokio::time::sleep(OUTAGE / (PER_PHASE as u32 * 2)).await;
    }
    tokio::time::sleep_until(frozen + OUTAGE).await;
    broker.thaw()?;
    committed.extend(during);

    // After: more events, and everything is accounted for.
    committed.extend(publish_committed(database, &publisher, 2 * PER_PHASE + 1..=3 * PER_PHASE).await?);
    let rest: HashSet<Uuid> = committed.values().copied().filter(|id| !before.contains(id)).collect();
    let after = match listening.await_all(&rest, false).await {
        Ok(after) => after,
        Err(error) => {
            let statuses = database.statuses().await?;
            return Err(fail(format!(
                "{}; outbox rows by status: {statuses:?}",
                error.message().unwrap_or_default()
            )));
        }
    };
    for (id, count) in after {
        *applied.entry(id).or_default() += count;
    }
    let expected: HashSet<Uuid> = committed.values().copied().collect();
    for (id, count) in &applied {
        assert!(expected.contains(id), "event {id} was applied but never committed");
        assert_eq!(*count, 1, "event {id} was applied {count} times");
    }
    assert_eq!(applied.len(), expected.len());
    assert_eq!(database.payments().await?, (1..=3 * PER_PHASE).collect::<Vec<_>>());
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    listening.stop().await
}

fn plumbing_failed(error: Error) -> Failed {
    fail(plumbing("private broker", error))
}

fn cases() -> Vec<Case<EndToEnd>> {
    vec![
        case!(
            "committed_events_have_their_effect_once_and_a_rewind_changes_nothing",
            committed_events_have_their_effect_once_and_a_rewind_changes_nothing
        ),
        case!(
            "events_published_while_the_broker_is_frozen_are_delivered_once",
            events_published_while_the_broker_is_frozen_are_delivered_once
        ),
    ]
}

fn main() -> ExitCode {
    let Ok(pg_url) = std::env::var(PG_VARIABLE) else {
        return server_missing("kafka end to end", PG_VARIABLE);
    };
    let bootstrap = match support::broker_or_exit("kafka end to end") {
        Ok(bootstrap) => bootstrap,
        Err(code) => return code,
    };
    Suite::new().add("end_to_end", Arc::new(EndToEnd { bootstrap, pg_url }), cases()).run()
}
