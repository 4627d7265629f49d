//! The orders service: `POST /orders` writes the order and its lines and publishes `order-placed`
//! plus one `order-line-added` per line in the same transaction; the relay delivers them.
//!
//! Settings come from the environment (or the same-named flags): `DATABASE_URL`, `BROKER_URL`,
//! `LISTEN_ADDR`, `ONCEBOX_CONFIG` (the oncebox YAML), `DLQ_OPERATOR_TOKEN`, `DLQ_READER_TOKEN`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use oncebox::dlq_api::{ApiToken, BearerTokens, DlqApi, Role};
use oncebox::kafka::{KafkaSender, KafkaSenderConfig};
use oncebox::mysql::MySqlDialect;
use oncebox::postgres::PgDialect;
use oncebox::rabbit::{RabbitSender, RabbitSenderConfig};
use oncebox::{Config, EventMeta, Lifecycle, Oncebox, Sender};
use oncebox_example_system::{
    BrokerUrl, Database, Failure, Health, NewLine, NewOrder, ORDER_LINE_ADDED, ORDER_PLACED, OrderLineAdded,
    OrderPlaced, OrderView, SHUTDOWN_DEADLINE, clock, ensure_kafka_topics, exit, init_tracing,
    install_prometheus, ops_router, serve, shop_schema, shutdown_signal,
};
use uuid::Uuid;

#[derive(Parser)]
#[command(about = "Takes orders and publishes their events through the oncebox outbox")]
struct Args {
    /// `postgres://…` or `mysql://…`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// `kafka://host:port` or `amqp://…`.
    #[arg(long, env = "BROKER_URL", hide_env_values = true)]
    broker_url: BrokerUrl,
    /// Where to serve HTTP (port 0: any free port, printed at start).
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    listen: String,
    /// The oncebox configuration (YAML or TOML).
    #[arg(long, env = "ONCEBOX_CONFIG", default_value = "examples/system/config/orders.yaml")]
    config: PathBuf,
    /// Bearer token of the DLQ API's operator role (named `operator` in the audit log).
    #[arg(long, env = "DLQ_OPERATOR_TOKEN", hide_env_values = true)]
    dlq_operator_token: String,
    /// Bearer token of the DLQ API's read-only role (named `reader`).
    #[arg(long, env = "DLQ_READER_TOKEN", hide_env_values = true)]
    dlq_reader_token: Option<String>,
    /// Partitions of a Kafka topic the service creates because it is missing.
    #[arg(long, env = "KAFKA_TOPIC_PARTITIONS", default_value_t = 2)]
    kafka_topic_partitions: i32,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    exit("orders-service", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), Failure> {
    let config = Config::from_file(&args.config)?;
    let scrape = install_prometheus()?;
    let sender = sender(&args, &config).await?;
    let tokens = tokens(&args)?;
    let re_drive_max_age = config.dlq_re_drive_max_age();
    match Database::of_url(&args.database_url, "DATABASE_URL")? {
        Database::Postgres => {
            let dialect = PgDialect::connect(&args.database_url).await?;
            sqlx::raw_sql(shop_schema::POSTGRES).execute(dialect.pool()).await?;
            let outbox = Oncebox::builder(config).dialect(dialect).sender_arc(sender).start().await?;
            let shop: Arc<dyn Shop> = Arc::new(PgShop { pool: outbox.dialect().pool().clone(), outbox });
            serve_shop(shop, &args.listen, scrape, tokens, re_drive_max_age).await
        }
        Database::MySql => {
            let dialect = MySqlDialect::connect(&args.database_url).await?;
            sqlx::raw_sql(shop_schema::MYSQL).execute(dialect.pool()).await?;
            let outbox = Oncebox::builder(config).dialect(dialect).sender_arc(sender).start().await?;
            let shop: Arc<dyn Shop> = Arc::new(MySqlShop { pool: outbox.dialect().pool().clone(), outbox });
            serve_shop(shop, &args.listen, scrape, tokens, re_drive_max_age).await
        }
    }
}

/// The sender `BROKER_URL` names, with the topics the configuration publishes to created first
/// on Kafka (RabbitMQ's exchanges are declared by the consumers that bind to them).
async fn sender(args: &Args, config: &Config) -> Result<Arc<dyn Sender>, Failure> {
    Ok(match &args.broker_url {
        BrokerUrl::Kafka(bootstrap) => {
            let mut topics: Vec<String> = config
                .outbox
                .iter()
                .flat_map(|outbox| outbox.events.values().map(|event| event.topic.clone()))
                .collect();
            topics.sort();
            topics.dedup();
            ensure_kafka_topics(bootstrap, &topics, args.kafka_topic_partitions).await?;
            Arc::new(KafkaSender::new(KafkaSenderConfig::new(bootstrap))?)
        }
        BrokerUrl::Amqp(url) => {
            let sender = RabbitSender::new(RabbitSenderConfig::new(url))?;
            sender.connect().await?;
            Arc::new(sender)
        }
    })
}

fn tokens(args: &Args) -> Result<BearerTokens, Failure> {
    let mut tokens = vec![ApiToken::new("operator", args.dlq_operator_token.clone(), Role::Operator)?];
    if let Some(reader) = &args.dlq_reader_token {
        tokens.push(ApiToken::new("reader", reader.clone(), Role::ReadOnly)?);
    }
    Ok(BearerTokens::new(tokens)?)
}

/// Serves the shop until a shutdown signal, then stops the relay within [`SHUTDOWN_DEADLINE`].
async fn serve_shop(
    shop: Arc<dyn Shop>,
    listen: &str,
    scrape: metrics_exporter_prometheus::PrometheusHandle,
    tokens: BearerTokens,
    re_drive_max_age: std::time::Duration,
) -> Result<(), Failure> {
    let dlq = DlqApi::with_tokens(shop.dlq(), tokens)
        .metrics(shop.metrics())
        .re_drive_max_age(re_drive_max_age)
        .mounted_at("/dlq")
        .router();
    let health = {
        let shop = shop.clone();
        Arc::new(move || Health::of_engine(&shop.state()))
    };
    let router = Router::new()
        .route("/orders", post(place_order))
        .route("/orders/{id}", get(get_order))
        .with_state(shop.clone())
        .nest("/dlq", dlq)
        .merge(ops_router(health, scrape));
    let served = serve(listen, router, shutdown_signal()).await;
    let stopped = shop.shutdown().await;
    served?;
    stopped
}

/// An error answer: `{"error": "…"}`. Server-side failures say only that they happened; the
/// cause goes to the log.
fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": message.into() }))).into_response()
}

fn failed(what: &str, error: &Failure) -> Response {
    tracing::error!(error = %error, "{what}");
    problem(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}; see the service log"))
}

async fn place_order(State(shop): State<Arc<dyn Shop>>, Json(order): Json<NewOrder>) -> Response {
    let total = match order.validate() {
        Ok(total) => total,
        Err(why) => return problem(StatusCode::UNPROCESSABLE_ENTITY, why),
    };
    match shop.place(&order, total).await {
        Ok(placed) => (StatusCode::CREATED, Json(placed)).into_response(),
        Err(error) => failed("placing the order failed", &error),
    }
}

async fn get_order(State(shop): State<Arc<dyn Shop>>, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return problem(StatusCode::BAD_REQUEST, format!("'{id}' is not an order id (a UUID)"));
    };
    match shop.get(id).await {
        Ok(Some(order)) => Json(order).into_response(),
        Ok(None) => problem(StatusCode::NOT_FOUND, format!("no order {id}")),
        Err(error) => failed("reading the order failed", &error),
    }
}

/// The shop on one database.
#[async_trait::async_trait]
trait Shop: Send + Sync + 'static {
    /// Writes the order, its lines and their events in one transaction.
    async fn place(&self, order: &NewOrder, total_cents: i64) -> Result<OrderView, Failure>;
    /// One order with its lines.
    async fn get(&self, id: Uuid) -> Result<Option<OrderView>, Failure>;
    /// The outbox engine's state.
    fn state(&self) -> Lifecycle;
    /// The dead letter queue, for the DLQ API.
    fn dlq(&self) -> Arc<dyn oncebox::DlqDao>;
    /// The metrics hook, for the DLQ API's manual-action counts.
    fn metrics(&self) -> Arc<dyn oncebox::OutboxMetrics>;
    /// Stops the relay.
    async fn shutdown(&self) -> Result<(), Failure>;
}

/// The shop's statements for one database: the same but for their placeholders.
struct Statements {
    insert_line: &'static str,
    insert_order: &'static str,
    select_order: &'static str,
    select_lines: &'static str,
    clock: &'static str,
}

const POSTGRES: Statements = Statements {
    insert_line: "INSERT INTO shop_order_lines (order_id, line_no, sku, quantity, price_cents) \
                  VALUES ($1, $2, $3, $4, $5)",
    insert_order: "INSERT INTO shop_orders (id, customer, total_cents, created_at_us) VALUES ($1, $2, $3, $4)",
    select_order: "SELECT customer, total_cents FROM shop_orders WHERE id = $1",
    select_lines: "SELECT sku, quantity, price_cents FROM shop_order_lines WHERE order_id = $1 ORDER BY line_no",
    clock: clock::POSTGRES,
};

const MYSQL: Statements = Statements {
    insert_line: "INSERT INTO shop_order_lines (order_id, line_no, sku, quantity, price_cents) \
                  VALUES (?, ?, ?, ?, ?)",
    insert_order: "INSERT INTO shop_orders (id, customer, total_cents, created_at_us) VALUES (?, ?, ?, ?)",
    select_order: "SELECT customer, total_cents FROM shop_orders WHERE id = ?",
    select_lines: "SELECT sku, quantity, price_cents FROM shop_order_lines WHERE order_id = ? ORDER BY line_no",
    clock: clock::MYSQL,
};

/// One implementation for both databases: sqlx's generic executor bounds would say the same at
/// greater length.
macro_rules! shop {
    ($shop:ident, $dialect:ty, $database:ty, $sql:ident) => {
        struct $shop {
            pool: sqlx::Pool<$database>,
            outbox: Oncebox<$dialect>,
        }

        #[async_trait::async_trait]
        impl Shop for $shop {
            async fn place(&self, order: &NewOrder, total_cents: i64) -> Result<OrderView, Failure> {
                let id = Uuid::now_v7();
                let lines: Vec<OrderLineAdded> = order
                    .lines
                    .iter()
                    .zip(1..)
                    .map(|(line, line_no)| OrderLineAdded {
                        order_id: id,
                        line_no,
                        sku: line.sku.clone(),
                        quantity: line.quantity,
                        price_cents: line.price_cents,
                    })
                    .collect();
                let placed = OrderPlaced {
                    order_id: id,
                    customer: order.customer.clone(),
                    total_cents,
                    lines: i32::try_from(lines.len())?,
                };
                let mut tx = self.pool.begin().await?;
                for line in &lines {
                    sqlx::query($sql.insert_line)
                        .bind(id.to_string())
                        .bind(line.line_no)
                        .bind(&line.sku)
                        .bind(line.quantity)
                        .bind(line.price_cents)
                        .execute(&mut *tx)
                        .await?;
                }
                let publisher = self.outbox.publisher();
                // Keyed by the order: on Kafka, an order's `order-placed` events share a partition.
                publisher
                    .publish_with(&mut tx, ORDER_PLACED, &placed, EventMeta::keyed(id.to_string()))
                    .await?;
                publisher.publish_all(&mut tx, ORDER_LINE_ADDED, &lines).await?;
                // The order row last, stamped as close to the commit as a statement gets.
                let now: i64 = sqlx::query_scalar($sql.clock).fetch_one(&mut *tx).await?;
                sqlx::query($sql.insert_order)
                    .bind(id.to_string())
                    .bind(&order.customer)
                    .bind(total_cents)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(OrderView {
                    id,
                    customer: order.customer.clone(),
                    total_cents,
                    lines: order.lines.clone(),
                })
            }

            async fn get(&self, id: Uuid) -> Result<Option<OrderView>, Failure> {
                let key = id.to_string();
                let order: Option<(String, i64)> =
                    sqlx::query_as($sql.select_order).bind(&key).fetch_optional(&self.pool).await?;
                let Some((customer, total_cents)) = order else {
                    return Ok(None);
                };
                let lines: Vec<(String, i32, i64)> =
                    sqlx::query_as($sql.select_lines).bind(&key).fetch_all(&self.pool).await?;
                let lines = lines.into_iter().map(|(sku, quantity, price_cents)| NewLine {
                    sku,
                    quantity,
                    price_cents,
                });
                Ok(Some(OrderView { id, customer, total_cents, lines: lines.collect() }))
            }

            fn state(&self) -> Lifecycle {
                self.outbox.state()
            }

            fn dlq(&self) -> Arc<dyn oncebox::DlqDao> {
                self.outbox.dlq()
            }

            fn metrics(&self) -> Arc<dyn oncebox::OutboxMetrics> {
                self.outbox.metrics()
            }

            async fn shutdown(&self) -> Result<(), Failure> {
                Ok(self.outbox.shutdown(SHUTDOWN_DEADLINE).await?)
            }
        }
    };
}

shop!(PgShop, PgDialect, sqlx::Postgres, POSTGRES);
shop!(MySqlShop, MySqlDialect, sqlx::MySql, MYSQL);
