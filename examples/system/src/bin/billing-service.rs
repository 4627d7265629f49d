//! The billing service: consumes `order-placed` and `order-line-added` and applies each through
//! the transactional inbox: the invoice (or invoice line) and the record of the event id commit in
//! one transaction, so a redelivered event finds its id recorded and changes nothing.
//!
//! Settings come from the environment (or the same-named flags): `DATABASE_URL`, `BROKER_URL`,
//! `LISTEN_ADDR`, `ONCEBOX_CONFIG` (the oncebox YAML), `ORDERS_TOPIC`, `BILLING_CONSUMER_GROUP`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use oncebox::consume::{ListenerBuilder, ListenerConfig, Received};
use oncebox::kafka::{KafkaListener, KafkaListenerConfig};
use oncebox::mysql::MySqlDialect;
use oncebox::postgres::PgDialect;
use oncebox::rabbit::{RabbitListener, RabbitListenerConfig, RabbitTopology};
use oncebox::{Config, Lifecycle, Oncebox};
use oncebox_example_system::{
    BILLING_CONSUMER, BrokerUrl, Database, Failure, Health, ORDER_LINE_ADDED, ORDER_PLACED, OrderLineAdded,
    OrderPlaced, SHUTDOWN_DEADLINE, billing_schema, clock, ensure_kafka_topics, exit, init_tracing,
    install_prometheus, ops_router, serve, shutdown_signal,
};
use uuid::Uuid;

#[derive(Parser)]
#[command(about = "Invoices orders from their events, each exactly once, through the oncebox inbox")]
struct Args {
    /// `postgres://…` or `mysql://…`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// `kafka://host:port` or `amqp://…`.
    #[arg(long, env = "BROKER_URL", hide_env_values = true)]
    broker_url: BrokerUrl,
    /// Where to serve `/health` and `/metrics` (port 0: any free port, printed at start).
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8081")]
    listen: String,
    /// The oncebox configuration (YAML or TOML).
    #[arg(long, env = "ONCEBOX_CONFIG", default_value = "examples/system/config/billing.yaml")]
    config: PathBuf,
    /// The Kafka topic or RabbitMQ exchange the orders service publishes to.
    #[arg(long, env = "ORDERS_TOPIC", default_value = "shop.orders")]
    orders_topic: String,
    /// The Kafka consumer group or RabbitMQ queue of the billing instances.
    #[arg(long, env = "BILLING_CONSUMER_GROUP", default_value = "billing")]
    consumer_group: String,
    /// Partitions of a Kafka topic the service creates because it is missing.
    #[arg(long, env = "KAFKA_TOPIC_PARTITIONS", default_value_t = 2)]
    kafka_topic_partitions: i32,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    exit("billing-service", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), Failure> {
    let config = Config::from_file(&args.config)?;
    let scrape = install_prometheus()?;
    let billing = match Database::of_url(&args.database_url, "DATABASE_URL")? {
        Database::Postgres => {
            let dialect = PgDialect::connect(&args.database_url).await?;
            sqlx::raw_sql(billing_schema::POSTGRES).execute(dialect.pool()).await?;
            Billing::Postgres(Oncebox::builder(config).dialect(dialect).start().await?)
        }
        Database::MySql => {
            let dialect = MySqlDialect::connect(&args.database_url).await?;
            sqlx::raw_sql(billing_schema::MYSQL).execute(dialect.pool()).await?;
            Billing::MySql(Oncebox::builder(config).dialect(dialect).start().await?)
        }
    };
    let billing = Arc::new(billing);
    let listening = Arc::new(AtomicBool::new(true));
    let health = {
        let (billing, listening) = (billing.clone(), listening.clone());
        Arc::new(move || {
            let mut health = Health::of_engine(&billing.state());
            if !listening.load(Ordering::SeqCst) {
                health = Health { state: "listener stopped".to_owned(), ok: false };
            }
            health
        })
    };

    // The listener stops at the shutdown signal; the HTTP server stops when the listener has,
    // whether at the signal or because it failed, so the process never serves a healthy
    // `/health` without consuming.
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn({
        let listen = args.listen.clone();
        async move {
            serve(&listen, ops_router(health, scrape), async {
                let _ = http_stopped.await;
            })
            .await
        }
    });
    let consumed = consume(&args, &billing).await;
    listening.store(false, Ordering::SeqCst);
    let _ = stop_http.send(());
    let served = server.await.map_err(|error| format!("the HTTP server task: {error}"))?;
    let stopped = billing.shutdown().await;
    consumed?;
    served?;
    stopped
}

/// Runs the listener `BROKER_URL` names until the shutdown signal.
async fn consume(args: &Args, billing: &Billing) -> Result<(), Failure> {
    let dead_letters = format!("{}.dead", args.orders_topic);
    match &args.broker_url {
        BrokerUrl::Kafka(bootstrap) => {
            let topics = [args.orders_topic.clone(), dead_letters.clone()];
            ensure_kafka_topics(bootstrap, &topics, args.kafka_topic_partitions).await?;
            let config =
                KafkaListenerConfig::new(bootstrap, &args.consumer_group, [args.orders_topic.as_str()])
                    .with_dead_letter_topic(dead_letters);
            let listener = billing.handlers(KafkaListener::builder(config)).build()?;
            listener.run(shutdown_signal()).await?;
        }
        BrokerUrl::Amqp(url) => {
            let topology = RabbitTopology::new(&args.orders_topic)
                .with_dead_letter(&dead_letters, format!("{}.dead", args.consumer_group));
            let config = RabbitListenerConfig::new(url, &args.consumer_group).with_declare(topology);
            let listener = billing.handlers(RabbitListener::builder(config)).build()?;
            listener.run(shutdown_signal()).await?;
        }
    }
    Ok(())
}

/// Billing on one database: its engine (the inbox and its clean-up) and its handlers.
enum Billing {
    Postgres(Oncebox<PgDialect>),
    MySql(Oncebox<MySqlDialect>),
}

impl Billing {
    /// The billing handlers on this database, the same for every broker.
    fn handlers<C: ListenerConfig>(&self, builder: ListenerBuilder<C>) -> ListenerBuilder<C> {
        match self {
            Self::Postgres(inboxes) => pg_handlers(builder, inboxes),
            Self::MySql(inboxes) => mysql_handlers(builder, inboxes),
        }
    }

    /// The engine's state (the inbox clean-up's).
    fn state(&self) -> Lifecycle {
        match self {
            Self::Postgres(inboxes) => inboxes.state(),
            Self::MySql(inboxes) => inboxes.state(),
        }
    }

    /// Stops the engine.
    async fn shutdown(&self) -> Result<(), Failure> {
        match self {
            Self::Postgres(inboxes) => Ok(inboxes.shutdown(SHUTDOWN_DEADLINE).await?),
            Self::MySql(inboxes) => Ok(inboxes.shutdown(SHUTDOWN_DEADLINE).await?),
        }
    }
}

/// The billing statements for one database: the same but for their placeholders.
struct Statements {
    insert_invoice: &'static str,
    insert_line: &'static str,
    clock: &'static str,
}

const POSTGRES: Statements = Statements {
    insert_invoice: "INSERT INTO billing_invoices (id, order_id, customer, amount_cents, event_id, created_at_us) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
    insert_line: "INSERT INTO billing_invoice_lines (id, order_id, line_no, amount_cents, event_id) \
                  VALUES ($1, $2, $3, $4, $5)",
    clock: clock::POSTGRES,
};

const MYSQL: Statements = Statements {
    insert_invoice: "INSERT INTO billing_invoices (id, order_id, customer, amount_cents, event_id, created_at_us) \
                     VALUES (?, ?, ?, ?, ?, ?)",
    insert_line: "INSERT INTO billing_invoice_lines (id, order_id, line_no, amount_cents, event_id) \
                  VALUES (?, ?, ?, ?, ?)",
    clock: clock::MYSQL,
};

/// The handlers for one database, the same but for its statements: each writes its invoice (or
/// invoice line) in the transaction where the inbox records the event id, so both commit together
/// and a redelivered event finds its id and never reaches the handler.
macro_rules! billing_handlers {
    ($handlers:ident, $dialect:ty, $sql:ident) => {
        fn $handlers<C: ListenerConfig>(
            builder: ListenerBuilder<C>,
            inboxes: &Oncebox<$dialect>,
        ) -> ListenerBuilder<C> {
            let dialect = inboxes.dialect().clone();
            builder
                .on_in(
                    ORDER_PLACED,
                    inboxes.inbox(BILLING_CONSUMER),
                    dialect.clone(),
                    |tx, event: Received<OrderPlaced, C::Source>| {
                        Box::pin(async move {
                            let order = &event.payload;
                            let now: i64 = sqlx::query_scalar($sql.clock).fetch_one(&mut **tx).await?;
                            sqlx::query($sql.insert_invoice)
                                .bind(Uuid::new_v4().to_string())
                                .bind(order.order_id.to_string())
                                .bind(&order.customer)
                                .bind(order.total_cents)
                                .bind(event.id.to_string())
                                .bind(now)
                                .execute(&mut **tx)
                                .await?;
                            Ok(())
                        })
                    },
                )
                .on_in(
                    ORDER_LINE_ADDED,
                    inboxes.inbox(BILLING_CONSUMER),
                    dialect,
                    |tx, event: Received<OrderLineAdded, C::Source>| {
                        Box::pin(async move {
                            let line = &event.payload;
                            let amount =
                                i64::from(line.quantity).checked_mul(line.price_cents).ok_or_else(|| {
                                    format!("line {} of order {} overflows", line.line_no, line.order_id)
                                })?;
                            sqlx::query($sql.insert_line)
                                .bind(Uuid::new_v4().to_string())
                                .bind(line.order_id.to_string())
                                .bind(line.line_no)
                                .bind(amount)
                                .bind(event.id.to_string())
                                .execute(&mut **tx)
                                .await?;
                            Ok(())
                        })
                    },
                )
        }
    };
}

billing_handlers!(pg_handlers, PgDialect, POSTGRES);
billing_handlers!(mysql_handlers, MySqlDialect, MYSQL);
