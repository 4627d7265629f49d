//! The whole oncebox loop, end to end. By default it needs no servers: an SQLite file database
//! and the in-memory broker, and the default build compiles nothing else. `--database-url
//! postgres://…` (or `mysql://…`, or `oracle://user:password@host:port/service`) and `--broker
//! amqp://…` or `--broker kafka://host:port` run the same loop against real servers; build those
//! backends with `--features postgres,rabbit` (or `mysql`, `oracle`, `kafka`, `full`).
//!
//! 1. Orders are placed in business transactions that also publish an `order-placed` event; every
//!    fifth transaction fails its business check and rolls back, taking its event with it.
//! 2. The relay delivers the committed events to the broker.
//! 3. A shipping consumer applies each event through the inbox: its handler (`on_in`) writes the
//!    shipment in the transaction where the inbox records the event id. Then the first event is
//!    handed to the handler again, as after a lost acknowledgement, and the inbox skips it.
//!
//! It prints the accounting and exits non-zero if any guarantee was broken.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
#[cfg(any(feature = "kafka", feature = "rabbit"))]
use oncebox::consume::Outcome;
use oncebox::consume::{EventHeaders, Handlers, Received, TxFuture};
#[cfg(feature = "kafka")]
use oncebox::kafka::{KafkaListener, KafkaListenerConfig, KafkaSender, KafkaSenderConfig};
#[cfg(feature = "mysql")]
use oncebox::mysql::MySqlDialect;
#[cfg(feature = "oracle")]
use oncebox::oracle::{OraDialect, OraTransaction};
#[cfg(feature = "postgres")]
use oncebox::postgres::PgDialect;
#[cfg(feature = "rabbit")]
use oncebox::rabbit::{
    RabbitListener, RabbitListenerConfig, RabbitSender, RabbitSenderConfig, RabbitTopology,
};
use oncebox::sqlite::SqliteDialect;
use oncebox::{Config, Consumed, Dialect, InboxWriter, Oncebox, OutboundMessage, Transactions};
use oncebox_testkit::MemoryBroker;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Parser)]
#[command(about = "Run the oncebox outbox → broker → inbox loop end to end")]
struct Args {
    /// `sqlite://path`, `postgres://…`, `mysql://…` or `oracle://…` (default: a fresh SQLite file in
    /// the temp dir).
    #[arg(long)]
    database_url: Option<String>,
    /// `memory` (in-process), `amqp://…` (RabbitMQ) or `kafka://host:port` (Kafka).
    #[arg(long, default_value = "memory")]
    broker: String,
    /// How many orders to place one by one (every fifth is rolled back).
    #[arg(long, default_value_t = 20)]
    orders: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: i64,
    customer: String,
    total_cents: i64,
}

const EVENT: &str = "order-placed";
const TOPIC: &str = "oncebox-quickstart-orders";
#[cfg(any(feature = "kafka", feature = "rabbit"))]
const QUEUE: &str = "oncebox-quickstart-shipping";

fn config() -> Result<Config, oncebox::Error> {
    Config::from_yaml_str(&format!(
        r#"
oncebox:
  tables:
    prefix: quickstart_
  outbox:
    events:
      {EVENT}:
        topic: {TOPIC}
        batch-size: 50
        polling:
          min-fixed-delay: 20ms
          max-fixed-delay: 500ms
          multiplier: 2.0
        backoff:
          delay: 200ms
          multiplier: 2.0
  inbox:
    clean-up:
      ttl: 24h
"#
    ))
}

/// Tables of earlier runs, dropped so the accounting starts from nothing.
const RESET: &str = "DROP TABLE IF EXISTS quickstart_outbox_events;
DROP TABLE IF EXISTS quickstart_outbox_dlq_events;
DROP TABLE IF EXISTS quickstart_outbox_consumed_events;
DROP TABLE IF EXISTS quickstart_outbox_jobs;
DROP TABLE IF EXISTS quickstart_orders;
DROP TABLE IF EXISTS quickstart_shipments;
CREATE TABLE quickstart_orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL, total_cents BIGINT NOT NULL);
CREATE TABLE quickstart_shipments (order_id BIGINT PRIMARY KEY, event_id TEXT NOT NULL);";

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The business side of the example, for one database.
trait Shop: Clone + Send + Sync + 'static {
    type Dialect: Dialect + Transactions + Clone;

    /// Drops what earlier runs left and creates the business tables.
    fn reset(&self) -> impl Future<Output = Result<(), Failure>> + Send;

    /// Places `orders` in one transaction with their events; commits or rolls back.
    fn place(
        &self,
        outbox: &Oncebox<Self::Dialect>,
        orders: &[OrderPlaced],
        commit: bool,
    ) -> impl Future<Output = Result<Vec<Uuid>, Failure>> + Send;

    /// The shipping handler: writes the shipment of `event`'s order in `tx`, the transaction in
    /// which the inbox has just recorded the event id, so both commit together. It never sees a
    /// duplicate: the inbox answers those before it runs.
    fn ship<'a, M: Send + 'static>(
        tx: &'a mut <Self::Dialect as Transactions>::Tx,
        event: Received<OrderPlaced, M>,
    ) -> TxFuture<'a>;

    /// Shipments made.
    fn shipments(&self) -> impl Future<Output = Result<i64, Failure>> + Send;
}

/// The databases take the same SQL but for their placeholders, so one implementation serves all.
macro_rules! shop {
    ($shop:ident, $dialect:ty, $database:ty, $insert_order:literal, $insert_shipment:literal) => {
        #[derive(Clone)]
        struct $shop {
            pool: sqlx::Pool<$database>,
        }

        impl Shop for $shop {
            type Dialect = $dialect;

            async fn reset(&self) -> Result<(), Failure> {
                sqlx::raw_sql(RESET).execute(&self.pool).await?;
                Ok(())
            }

            async fn place(
                &self,
                outbox: &Oncebox<$dialect>,
                orders: &[OrderPlaced],
                commit: bool,
            ) -> Result<Vec<Uuid>, Failure> {
                let mut tx = self.pool.begin().await?;
                for order in orders {
                    sqlx::query($insert_order)
                        .bind(order.order_id)
                        .bind(&order.customer)
                        .bind(order.total_cents)
                        .execute(&mut *tx)
                        .await?;
                }
                // One order: one event; several: one INSERT for all their events.
                let ids = match orders {
                    [order] => vec![outbox.publisher().publish(&mut tx, EVENT, order).await?],
                    _ => outbox.publisher().publish_all(&mut tx, EVENT, orders).await?,
                };
                if commit {
                    tx.commit().await?
                } else {
                    tx.rollback().await?
                }
                Ok(ids)
            }

            fn ship<'a, M: Send + 'static>(
                tx: &'a mut sqlx::Transaction<'static, $database>,
                event: Received<OrderPlaced, M>,
            ) -> TxFuture<'a> {
                Box::pin(async move {
                    sqlx::query($insert_shipment)
                        .bind(event.payload.order_id)
                        .bind(event.id.to_string())
                        .execute(&mut **tx)
                        .await?;
                    Ok(())
                })
            }

            async fn shipments(&self) -> Result<i64, Failure> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM quickstart_shipments")
                    .fetch_one(&self.pool)
                    .await?)
            }
        }
    };
}

shop!(
    SqliteShop,
    SqliteDialect,
    sqlx::Sqlite,
    "INSERT INTO quickstart_orders (id, customer, total_cents) VALUES ($1, $2, $3)",
    "INSERT INTO quickstart_shipments (order_id, event_id) VALUES ($1, $2)"
);
#[cfg(feature = "postgres")]
shop!(
    PgShop,
    PgDialect,
    sqlx::Postgres,
    "INSERT INTO quickstart_orders (id, customer, total_cents) VALUES ($1, $2, $3)",
    "INSERT INTO quickstart_shipments (order_id, event_id) VALUES ($1, $2)"
);
#[cfg(feature = "mysql")]
shop!(
    MySqlShop,
    MySqlDialect,
    sqlx::MySql,
    "INSERT INTO quickstart_orders (id, customer, total_cents) VALUES (?, ?, ?)",
    "INSERT INTO quickstart_shipments (order_id, event_id) VALUES (?, ?)"
);

/// The Oracle shop: the `oracle` crate blocks, so the business statements run through
/// [`OraTransaction::run`] on a blocking thread, in the transaction the publisher and the inbox
/// write into.
#[cfg(feature = "oracle")]
#[derive(Clone)]
struct OraShop {
    dialect: OraDialect,
}

#[cfg(feature = "oracle")]
impl OraShop {
    /// Runs `sql` with `values` in `tx`.
    async fn run_in(
        tx: &OraTransaction,
        sql: &'static str,
        values: Vec<Box<dyn oncebox::oracle::oracle::sql_type::ToSql + Send>>,
    ) -> Result<(), Failure> {
        tx.run(move |connection| {
            let binds: Vec<&dyn oncebox::oracle::oracle::sql_type::ToSql> =
                values.iter().map(|value| value.as_ref() as _).collect();
            connection.execute(sql, &binds).map(drop)
        })
        .await?;
        Ok(())
    }
}

#[cfg(feature = "oracle")]
impl Shop for OraShop {
    type Dialect = OraDialect;

    async fn reset(&self) -> Result<(), Failure> {
        let tx = self.dialect.begin().await?;
        tx.run(|connection| {
            for table in [
                "quickstart_outbox_events",
                "quickstart_outbox_dlq_events",
                "quickstart_outbox_consumed_events",
                "quickstart_outbox_jobs",
                "quickstart_orders",
                "quickstart_shipments",
            ] {
                // ORA-00942: the table does not exist yet.
                match connection.execute(&format!("DROP TABLE {table} PURGE"), &[]) {
                    Err(error) if error.oci_code() != Some(942) => return Err(error),
                    _ => {}
                }
            }
            connection.execute(
                "CREATE TABLE quickstart_orders (id NUMBER(19) PRIMARY KEY, \
                 customer VARCHAR2(255) NOT NULL, total_cents NUMBER(19) NOT NULL)",
                &[],
            )?;
            connection.execute(
                "CREATE TABLE quickstart_shipments (order_id NUMBER(19) PRIMARY KEY, event_id VARCHAR2(36) NOT NULL)",
                &[],
            )?;
            Ok(())
        })
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn place(
        &self,
        outbox: &Oncebox<OraDialect>,
        orders: &[OrderPlaced],
        commit: bool,
    ) -> Result<Vec<Uuid>, Failure> {
        let mut tx = self.dialect.begin().await?;
        for order in orders {
            let values: Vec<Box<dyn oncebox::oracle::oracle::sql_type::ToSql + Send>> =
                vec![Box::new(order.order_id), Box::new(order.customer.clone()), Box::new(order.total_cents)];
            Self::run_in(
                &tx,
                "INSERT INTO quickstart_orders (id, customer, total_cents) VALUES (:1, :2, :3)",
                values,
            )
            .await?;
        }
        let ids = match orders {
            [order] => vec![outbox.publisher().publish(&mut tx, EVENT, order).await?],
            _ => outbox.publisher().publish_all(&mut tx, EVENT, orders).await?,
        };
        if commit {
            tx.commit().await?
        } else {
            tx.rollback().await?
        }
        Ok(ids)
    }

    fn ship<'a, M: Send + 'static>(
        tx: &'a mut OraTransaction,
        event: Received<OrderPlaced, M>,
    ) -> TxFuture<'a> {
        Box::pin(async move {
            let values: Vec<Box<dyn oncebox::oracle::oracle::sql_type::ToSql + Send>> =
                vec![Box::new(event.payload.order_id), Box::new(event.id.to_string())];
            Self::run_in(tx, "INSERT INTO quickstart_shipments (order_id, event_id) VALUES (:1, :2)", values)
                .await
        })
    }

    async fn shipments(&self) -> Result<i64, Failure> {
        let tx = self.dialect.begin().await?;
        let count = tx
            .run(|connection| {
                connection.query_row_as::<i64>("SELECT COUNT(*) FROM quickstart_shipments", &[])
            })
            .await?;
        tx.rollback().await?;
        Ok(count)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("quickstart failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn fresh_sqlite_url() -> Result<String, Failure> {
    let directory = std::env::temp_dir().join("oncebox-quickstart");
    std::fs::create_dir_all(&directory)?;
    let path = directory.join("quickstart.db");
    for suffix in ["", "-wal", "-shm"] {
        let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::remove_file(file)?;
        }
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// Redacts the password of a URL for printing.
fn shown(url: &str) -> String {
    oncebox::redact::redact_url(url)
}

async fn run(args: Args) -> Result<bool, Failure> {
    let database_url = match args.database_url {
        Some(url) => url,
        None => fresh_sqlite_url()?,
    };
    let broker = match args.broker.as_str() {
        "memory" => Broker::Memory,
        url if url.starts_with("amqp://") || url.starts_with("amqps://") => Broker::Amqp(url.to_owned()),
        url if url.starts_with("kafka://") => Broker::Kafka(url.to_owned()),
        other => {
            return Err(
                format!("unsupported --broker '{other}': use memory, amqp://… or kafka://host:port").into()
            );
        }
    };
    println!("database: {}", shown(&database_url));
    println!("broker:   {}", broker.shown());
    if database_url.starts_with("sqlite:") {
        let dialect = SqliteDialect::connect(&database_url).await?;
        let shop = SqliteShop { pool: dialect.pool().clone() };
        run_with(shop, dialect, broker, args.orders).await
    } else if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let dialect = PgDialect::connect(&database_url).await?;
            let shop = PgShop { pool: dialect.pool().clone() };
            run_with(shop, dialect, broker, args.orders).await
        }
        #[cfg(not(feature = "postgres"))]
        Err(feature_missing("postgres"))
    } else if database_url.starts_with("mysql://") || database_url.starts_with("mariadb://") {
        #[cfg(feature = "mysql")]
        {
            let dialect = MySqlDialect::connect(&database_url).await?;
            let shop = MySqlShop { pool: dialect.pool().clone() };
            run_with(shop, dialect, broker, args.orders).await
        }
        #[cfg(not(feature = "mysql"))]
        Err(feature_missing("mysql"))
    } else if database_url.starts_with("oracle://") {
        #[cfg(feature = "oracle")]
        {
            let dialect = OraDialect::connect(&database_url).await?;
            let shop = OraShop { dialect: dialect.clone() };
            run_with(shop, dialect, broker, args.orders).await
        }
        #[cfg(not(feature = "oracle"))]
        Err(feature_missing("oracle"))
    } else {
        Err(format!(
            "unsupported --database-url '{}': use sqlite://, postgres://, mysql:// or oracle://",
            shown(&database_url)
        )
        .into())
    }
}

/// The error for a URL whose backend this build left out: the default build has SQLite and the
/// in-memory broker only, so the first run compiles nothing it does not use.
#[allow(dead_code, reason = "unused when every backend is built")]
fn feature_missing(feature: &str) -> Failure {
    format!(
        "this quickstart was built without the `{feature}` backend: run it with \
         `cargo run --example quickstart --features {feature} -- …` (or `--features full`)"
    )
    .into()
}

/// What the consumer saw.
#[derive(Default)]
struct Tally {
    received: Mutex<HashSet<Uuid>>,
    applied: AtomicUsize,
    duplicates: AtomicUsize,
}

impl Tally {
    /// Counts one handled delivery of event `id`.
    fn count(&self, id: Uuid, consumed: &Consumed<()>) {
        if let Ok(mut received) = self.received.lock() {
            received.insert(id);
        }
        match consumed {
            Consumed::Applied(()) => self.applied.fetch_add(1, Ordering::SeqCst),
            Consumed::Duplicate => self.duplicates.fetch_add(1, Ordering::SeqCst),
        };
    }
}

/// Counts a listener's applied and duplicate deliveries into `tally` until the listener is gone.
#[cfg(any(feature = "kafka", feature = "rabbit"))]
fn tally_outcomes(mut outcomes: tokio::sync::broadcast::Receiver<Outcome>, tally: Arc<Tally>) {
    tokio::spawn(async move {
        loop {
            match outcomes.recv().await {
                Ok(Outcome::Applied { id }) => tally.count(id, &Consumed::Applied(())),
                Ok(Outcome::Duplicate { id }) => tally.count(id, &Consumed::Duplicate),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    eprintln!("the tally missed {missed} listener outcomes; the accounting will say so");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// A relayed message as a listener hands it to its handlers: its headers read as they go on the
/// wire, by the same decoding every transport uses.
fn as_received(message: &OutboundMessage) -> Result<Received<Vec<u8>, ()>, oncebox::Error> {
    let wire = message.wire_headers();
    let headers = EventHeaders::decode(
        "the in-memory broker",
        wire.iter().map(|(name, value)| (name.as_str(), Some(value.as_str()))),
    )?;
    let event_type = headers.event_type.clone().unwrap_or_else(|| message.event_type.clone());
    Ok(headers.into_received(event_type, (), message.payload.clone().into_bytes()))
}

/// Where the relay delivers.
enum Broker {
    Memory,
    Amqp(String),
    Kafka(String),
}

impl Broker {
    fn shown(&self) -> String {
        match self {
            Self::Memory => "in-memory".to_owned(),
            Self::Amqp(url) => shown(url),
            Self::Kafka(url) => url.clone(),
        }
    }
}

#[cfg(feature = "kafka")]
/// Creates `topic` (one partition) unless it exists: the quickstart's counterpart of the RabbitMQ
/// queue declaration, since a broker need not create topics on first use.
async fn create_topic(url: &str, topic: &str) -> Result<(), Failure> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::types::RDKafkaErrorCode;

    let bootstrap = url.strip_prefix("kafka://").unwrap_or(url);
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in
        admin.create_topics(&[NewTopic::new(topic, 1, TopicReplication::Fixed(1))], &options).await?
    {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("creating Kafka topic {name}: {code}").into()),
        }
    }
    Ok(())
}

/// A stop signal and the listener task it ends.
type RunningListener = (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<oncebox::Result<()>>);

#[cfg(any(feature = "kafka", feature = "rabbit"))]
/// Spawns the listener loop `run`, handing it a shutdown future that resolves when the returned
/// sender fires (or is dropped).
fn spawn_listener<F, Fut>(run: F) -> RunningListener
where
    F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
    Fut: Future<Output = oncebox::Result<()>> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = Box::pin(async move {
        let _ = stopped.await;
    });
    (stop, tokio::spawn(run(shutdown)))
}

async fn run_with<S: Shop>(shop: S, dialect: S::Dialect, broker: Broker, orders: u32) -> Result<bool, Failure>
where
    Arc<<S::Dialect as Dialect>::Writer>: InboxWriter<<S::Dialect as Transactions>::Tx>,
{
    shop.reset().await?;
    let memory = MemoryBroker::new();
    let mut subscription = memory.subscribe(TOPIC);
    let tally = Arc::new(Tally::default());
    // The handlers' transactions come from the same pool as the engine's.
    let transactions = dialect.clone();
    let builder = Oncebox::builder(config()?).dialect(dialect);
    let (outbox, listener): (_, Option<RunningListener>) = match &broker {
        Broker::Memory => (builder.sender(memory.clone()).start().await?, None),
        #[cfg(not(feature = "kafka"))]
        Broker::Kafka(_) => return Err(feature_missing("kafka")),
        #[cfg(not(feature = "rabbit"))]
        Broker::Amqp(_) => return Err(feature_missing("rabbit")),
        #[cfg(feature = "kafka")]
        Broker::Kafka(url) => {
            create_topic(url, TOPIC).await?;
            let outbox = builder.sender(KafkaSender::new(KafkaSenderConfig::new(url))?).start().await?;
            // One consumer group across runs, like the RabbitMQ queue: a run starts after the
            // offsets the previous one committed.
            let listener = KafkaListener::builder(KafkaListenerConfig::new(url, QUEUE, [TOPIC]))
                .on_in(EVENT, outbox.inbox("shipping"), transactions.clone(), S::ship)
                .build()?;
            tally_outcomes(listener.outcomes(), tally.clone());
            let running = spawn_listener(|shutdown| async move { listener.run(shutdown).await });
            (outbox, Some(running))
        }
        #[cfg(feature = "rabbit")]
        Broker::Amqp(url) => {
            let outbox = builder.sender(RabbitSender::new(RabbitSenderConfig::new(url))?).start().await?;
            // The consumer declares and binds its queue; until it has, mandatory publishing reports
            // the events unroutable and the relay retries them after a short backoff.
            let listener = RabbitListener::builder(
                RabbitListenerConfig::new(url, QUEUE).with_declare(RabbitTopology::new(TOPIC)),
            )
            .on_in(EVENT, outbox.inbox("shipping"), transactions.clone(), S::ship)
            .build()?;
            tally_outcomes(listener.outcomes(), tally.clone());
            let running = spawn_listener(|shutdown| async move { listener.run(shutdown).await });
            (outbox, Some(running))
        }
    };
    // The same handler without a broker: the in-memory broker's messages, and the redelivery below.
    let handlers: Handlers<()> =
        Handlers::new().on_in(EVENT, outbox.inbox("shipping"), transactions, S::ship);
    let handler = handlers.get(EVENT).ok_or("the shipping handler is not registered")?;

    // 1. Business transactions that publish.
    let mut committed = BTreeMap::new();
    let mut rolled_back = HashSet::new();
    for order_id in 1..=i64::from(orders) {
        let order =
            OrderPlaced { order_id, customer: format!("customer-{order_id}"), total_cents: 1_000 + order_id };
        let commit = order_id % 5 != 0;
        let ids = shop.place(&outbox, std::slice::from_ref(&order), commit).await?;
        if commit {
            committed.extend(ids.into_iter().map(|id| (id, order.clone())));
        } else {
            rolled_back.extend(ids);
        }
    }
    // A bulk import: three orders and their events in one transaction.
    let bulk: Vec<OrderPlaced> = (1..=3)
        .map(|n| OrderPlaced { order_id: 100_000 + n, customer: "bulk".into(), total_cents: 500 })
        .collect();
    committed.extend(shop.place(&outbox, &bulk, true).await?.into_iter().zip(bulk));
    println!("published: {} committed, {} rolled back", committed.len(), rolled_back.len());

    // 2 and 3. The relay delivers; the shipping consumer applies through the inbox.
    let deadline = Instant::now() + Duration::from_secs(60);
    while tally.applied.load(Ordering::SeqCst) < committed.len() && Instant::now() < deadline {
        if !matches!(broker, Broker::Memory) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), subscription.recv()).await
        else {
            continue;
        };
        let consumed = handler(as_received(&message)?).await.map_err(|failure| format!("{failure:?}"))?;
        tally.count(message.id, &consumed);
    }
    // The first event once more, as a broker delivers it again after a lost acknowledgement: the
    // inbox has its id, so the handler does not run.
    if let Some((&id, order)) = committed.iter().next() {
        let again = Received {
            id,
            event_type: EVENT.to_owned(),
            payload_type: None,
            created_at: None,
            headers: oncebox::Headers::new(),
            source: (),
            payload: serde_json::to_vec(order)?,
        };
        let consumed = handler(again).await.map_err(|failure| format!("{failure:?}"))?;
        tally.count(id, &consumed);
    }
    outbox.shutdown(Duration::from_secs(10)).await?;
    if let Some((stop, running)) = listener {
        let _ = stop.send(());
        running.await??;
    }
    let committed: HashSet<Uuid> = committed.into_keys().collect();

    // Accounting.
    let received: HashSet<Uuid> = tally.received.lock().map(|ids| ids.clone()).unwrap_or_default();
    let lost: Vec<&Uuid> = committed.iter().filter(|id| !received.contains(id)).collect();
    let leaked: Vec<&Uuid> = rolled_back.iter().filter(|id| received.contains(id)).collect();
    let shipments = shop.shipments().await?;
    let (applied, duplicates) =
        (tally.applied.load(Ordering::SeqCst), tally.duplicates.load(Ordering::SeqCst));
    println!(
        "delivered: {} events to the consumer ({} rolled-back events delivered)",
        received.len(),
        leaked.len()
    );
    println!("consumed:  {applied} applied, {duplicates} duplicate skipped by the inbox");
    println!("effects:   {shipments} shipments for {} committed orders", committed.len());
    let ok = lost.is_empty()
        && leaked.is_empty()
        && applied == committed.len()
        && usize::try_from(shipments).is_ok_and(|n| n == committed.len())
        && duplicates >= 1;
    if ok {
        println!("ok: every committed event delivered, no rolled-back event delivered, each effect once");
    } else {
        println!("NOT OK: lost {lost:?}, leaked {leaked:?}");
    }
    Ok(ok)
}
