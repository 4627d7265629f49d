//! The whole oncebox loop on one machine with no servers: an SQLite file database and the
//! in-memory broker.
//!
//! 1. Orders are placed in business transactions that also publish an `order-placed` event; every
//!    fifth transaction fails its business check and rolls back, taking its event with it.
//! 2. The relay delivers the committed events to the broker.
//! 3. A shipping consumer applies each event through the inbox, in the same transaction as its
//!    effect; one message is delivered twice and its second copy is skipped.
//!
//! It prints the accounting and exits non-zero if any guarantee was broken.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox::sqlite::SqliteDialect;
use oncebox::{Config, Consumed, Oncebox, OutboundMessage};
use oncebox_testkit::MemoryBroker;
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;
use uuid::Uuid;

#[derive(Parser)]
#[command(about = "Run the oncebox outbox → broker → inbox loop end to end")]
struct Args {
    /// Database URL; this build supports `sqlite://path` (default: a fresh file in the temp dir).
    #[arg(long)]
    database_url: Option<String>,
    /// Broker; this build supports `memory` (in-process).
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

const CONFIG: &str = r#"
oncebox:
  outbox:
    events:
      order-placed:
        topic: orders
        batch-size: 50
        polling:
          min-fixed-delay: 20ms
          max-fixed-delay: 500ms
          multiplier: 2.0
  inbox:
    clean-up:
      ttl: 24h
"#;

type Failure = Box<dyn std::error::Error + Send + Sync>;

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

fn fresh_database_url() -> Result<String, Failure> {
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

async fn run(args: Args) -> Result<bool, Failure> {
    let database_url = match args.database_url {
        Some(url) if url.starts_with("sqlite:") => url,
        Some(url) => {
            return Err(
                format!("unsupported --database-url '{url}': this build supports sqlite:// only").into()
            );
        }
        None => fresh_database_url()?,
    };
    if args.broker != "memory" {
        return Err(format!("unsupported --broker '{}': this build supports memory only", args.broker).into());
    }
    println!("database: {database_url}");
    println!("broker:   in-memory");

    let dialect = SqliteDialect::connect(&database_url).await?;
    let pool = dialect.pool().clone();
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS shipments (order_id INTEGER PRIMARY KEY, event_id TEXT NOT NULL);",
    )
    .execute(&pool)
    .await?;

    let broker = MemoryBroker::new();
    let mut subscription = broker.subscribe("orders");
    let config = Config::from_yaml_str(CONFIG)?;
    let outbox = Oncebox::builder(config).dialect(dialect).sender(broker.clone()).start().await?;

    // 1. Business transactions that publish.
    let mut committed = HashSet::new();
    let mut rolled_back = HashSet::new();
    for order_id in 1..=i64::from(args.orders) {
        let order =
            OrderPlaced { order_id, customer: format!("customer-{order_id}"), total_cents: 1_000 + order_id };
        let mut tx = pool.begin().await?;
        insert_order(&mut tx, &order).await?;
        let event_id = outbox.publisher().publish(&mut tx, "order-placed", &order).await?;
        if order_id % 5 == 0 {
            tx.rollback().await?;
            rolled_back.insert(event_id);
        } else {
            tx.commit().await?;
            committed.insert(event_id);
        }
    }
    // A bulk import: three orders and their events in one transaction, one INSERT for the events.
    let bulk: Vec<OrderPlaced> = (1..=3)
        .map(|n| OrderPlaced { order_id: 1_000 + n, customer: "bulk".into(), total_cents: 500 })
        .collect();
    let mut tx = pool.begin().await?;
    for order in &bulk {
        insert_order(&mut tx, order).await?;
    }
    committed.extend(outbox.publisher().publish_all(&mut tx, "order-placed", &bulk).await?);
    tx.commit().await?;
    println!("published: {} committed, {} rolled back", committed.len(), rolled_back.len());

    // 2 and 3. The relay delivers; the shipping consumer applies through the inbox.
    let inbox = outbox.inbox("shipping");
    let mut applied = 0usize;
    let mut duplicates = 0usize;
    let mut received: Vec<OutboundMessage> = Vec::new();
    let mut redelivered = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while applied < committed.len() && Instant::now() < deadline {
        let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), subscription.recv()).await
        else {
            continue;
        };
        let mut deliveries = vec![message.clone()];
        if !redelivered {
            // The broker hands the first message over twice, as brokers do after a lost ack.
            deliveries.push(message.clone());
            redelivered = true;
        }
        for delivery in deliveries {
            match ship(&pool, &inbox, &delivery).await? {
                Consumed::Applied(()) => applied += 1,
                Consumed::Duplicate => duplicates += 1,
            }
        }
        received.push(message);
    }
    outbox.shutdown(Duration::from_secs(10)).await?;

    // Accounting.
    let delivered: HashSet<Uuid> = broker.delivered().iter().map(|m| m.id).collect();
    let lost: Vec<&Uuid> = committed.iter().filter(|id| !delivered.contains(id)).collect();
    let leaked: Vec<&Uuid> = rolled_back.iter().filter(|id| delivered.contains(id)).collect();
    let shipments: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shipments").fetch_one(&pool).await?;
    println!(
        "delivered: {} events by the relay ({} rolled-back events delivered)",
        delivered.len(),
        leaked.len()
    );
    println!("consumed:  {applied} applied, {duplicates} duplicate skipped by the inbox");
    println!("effects:   {shipments} shipments for {} committed orders", committed.len());

    let ok = lost.is_empty()
        && leaked.is_empty()
        && applied == committed.len()
        && shipments as usize == committed.len()
        && duplicates == 1;
    if ok {
        println!("ok: every committed event delivered, no rolled-back event delivered, each effect once");
    } else {
        println!("NOT OK: lost {lost:?}, leaked {leaked:?}");
    }
    Ok(ok)
}

/// The business write the events describe.
async fn insert_order(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    order: &OrderPlaced,
) -> Result<(), Failure> {
    sqlx::query("INSERT INTO orders (id, customer, total_cents) VALUES (?, ?, ?)")
        .bind(order.order_id)
        .bind(&order.customer)
        .bind(order.total_cents)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Applies one delivery: the shipment row and the inbox record commit together.
async fn ship(
    pool: &SqlitePool,
    inbox: &oncebox::Inbox<std::sync::Arc<oncebox::sqlite::SqliteWriter>>,
    message: &OutboundMessage,
) -> Result<Consumed<()>, Failure> {
    let order: OrderPlaced = serde_json::from_str(&message.payload)?;
    let mut tx = pool.begin().await?;
    let outcome = inbox
        .consume_in(&mut tx, message.id, async |tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>| {
            sqlx::query("INSERT INTO shipments (order_id, event_id) VALUES (?, ?)")
                .bind(order.order_id)
                .bind(message.id.to_string())
                .execute(&mut **tx)
                .await
                .map(|_| ())
        })
        .await?;
    tx.commit().await?;
    if outcome.is_applied() {
        inbox.remember(message.id).await;
    }
    Ok(outcome)
}
