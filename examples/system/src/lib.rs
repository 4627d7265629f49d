//! An example system on oncebox, the shape a team copies to start its own:
//!
//! * `orders-service` (axum) writes an order and its lines and publishes `order-placed` and one
//!   `order-line-added` per line in the same transaction; its relay delivers them to Kafka or
//!   RabbitMQ. It serves `/health`, `/metrics` and the DLQ API with its console.
//! * `billing-service` consumes both event types and applies each through the transactional inbox:
//!   an invoice per order, an invoice line per order line, each exactly once.
//! * `traffic-generator` drives `POST /orders` at a rate for a while, then accounts by reading both
//!   services' tables: every accepted order has one invoice with all its lines, none has two, and
//!   the commit-to-invoice delay.
//!
//! This library holds what the three binaries share: the events, the tables, the broker URL, the
//! operational routes and the shutdown signal.
//!
//! ```
//! use oncebox_example_system::BrokerUrl;
//!
//! let broker: BrokerUrl = "kafka://127.0.0.1:9092".parse()?;
//! assert_eq!(broker.to_string(), "kafka://127.0.0.1:9092");
//! assert!("nats://host".parse::<BrokerUrl>().is_err());
//! # Ok::<(), String>(())
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use oncebox::Lifecycle;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An error a binary reports and exits with.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Published once per order, keyed by the order id.
pub const ORDER_PLACED: &str = "order-placed";
/// Published once per order line, all lines of an order with one statement.
pub const ORDER_LINE_ADDED: &str = "order-line-added";
/// The billing service's inbox consumer name.
pub const BILLING_CONSUMER: &str = "billing";

/// The payload of [`ORDER_PLACED`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPlaced {
    /// The order.
    pub order_id: Uuid,
    /// Who placed it.
    pub customer: String,
    /// The sum of its lines.
    pub total_cents: i64,
    /// How many lines it has (as many [`ORDER_LINE_ADDED`] events follow).
    pub lines: i32,
}

/// The payload of [`ORDER_LINE_ADDED`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderLineAdded {
    /// The order the line belongs to.
    pub order_id: Uuid,
    /// The line's position in the order, from 1.
    pub line_no: i32,
    /// The article.
    pub sku: String,
    /// How many.
    pub quantity: i32,
    /// The price of one.
    pub price_cents: i64,
}

/// The body of `POST /orders`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewOrder {
    /// Who places it (1 to 200 characters).
    pub customer: String,
    /// Its lines (1 to [`MAX_LINES`]).
    pub lines: Vec<NewLine>,
}

/// One line of a [`NewOrder`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewLine {
    /// The article (1 to 100 characters).
    pub sku: String,
    /// How many (1 to 10,000).
    pub quantity: i32,
    /// The price of one (0 to 100,000,000).
    pub price_cents: i64,
}

/// The most lines one order may have.
pub const MAX_LINES: usize = 100;

impl NewOrder {
    /// The order's total, or what is wrong with it, naming the field.
    pub fn validate(&self) -> Result<i64, String> {
        let customer = self.customer.chars().count();
        if customer == 0 || customer > 200 {
            return Err(format!("customer must have 1 to 200 characters, not {customer}"));
        }
        if self.lines.is_empty() || self.lines.len() > MAX_LINES {
            return Err(format!("an order has 1 to {MAX_LINES} lines, not {}", self.lines.len()));
        }
        let mut total: i64 = 0;
        for (index, line) in self.lines.iter().enumerate() {
            let sku = line.sku.chars().count();
            if sku == 0 || sku > 100 {
                return Err(format!("lines[{index}].sku must have 1 to 100 characters, not {sku}"));
            }
            if !(1..=10_000).contains(&line.quantity) {
                return Err(format!("lines[{index}].quantity must be 1 to 10000, not {}", line.quantity));
            }
            if !(0..=100_000_000).contains(&line.price_cents) {
                return Err(format!(
                    "lines[{index}].price_cents must be 0 to 100000000, not {}",
                    line.price_cents
                ));
            }
            // Bounded by the checks above: 100 lines × 10^4 × 10^8 fits an i64.
            total += i64::from(line.quantity) * line.price_cents;
        }
        Ok(total)
    }
}

/// An order as `POST /orders` and `GET /orders/{id}` return it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderView {
    /// The order's id.
    pub id: Uuid,
    /// Who placed it.
    pub customer: String,
    /// The sum of its lines.
    pub total_cents: i64,
    /// Its lines, in order.
    pub lines: Vec<NewLine>,
}

/// The SQL databases the services run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// `postgres://…`
    Postgres,
    /// `mysql://…` (MySQL or MariaDB)
    MySql,
}

impl Database {
    /// The database a URL names, or an error naming `setting` and the schemes it accepts. The
    /// error never repeats the URL, which may carry a password.
    pub fn of_url(url: &str, setting: &str) -> Result<Self, Failure> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Ok(Self::MySql)
        } else {
            Err(format!("{setting} must start with postgres:// or mysql://").into())
        }
    }
}

/// The shop's tables (the orders service creates them).
pub mod shop_schema {
    /// PostgreSQL.
    pub const POSTGRES: &str = "
CREATE TABLE IF NOT EXISTS shop_orders (
    id VARCHAR(36) PRIMARY KEY,
    customer VARCHAR(200) NOT NULL,
    total_cents BIGINT NOT NULL,
    created_at_us BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS shop_orders_customer ON shop_orders (customer);
CREATE TABLE IF NOT EXISTS shop_order_lines (
    order_id VARCHAR(36) NOT NULL,
    line_no INT NOT NULL,
    sku VARCHAR(100) NOT NULL,
    quantity INT NOT NULL,
    price_cents BIGINT NOT NULL,
    PRIMARY KEY (order_id, line_no)
);";
    /// MySQL and MariaDB.
    pub const MYSQL: &str = "
CREATE TABLE IF NOT EXISTS shop_orders (
    id VARCHAR(36) PRIMARY KEY,
    customer VARCHAR(200) NOT NULL,
    total_cents BIGINT NOT NULL,
    created_at_us BIGINT NOT NULL,
    INDEX shop_orders_customer (customer)
);
CREATE TABLE IF NOT EXISTS shop_order_lines (
    order_id VARCHAR(36) NOT NULL,
    line_no INT NOT NULL,
    sku VARCHAR(100) NOT NULL,
    quantity INT NOT NULL,
    price_cents BIGINT NOT NULL,
    PRIMARY KEY (order_id, line_no)
);";
}

/// The billing service's tables. Nothing but the inbox keeps an order from being invoiced twice:
/// no unique key on `order_id`, so the traffic generator's accounting sees a double effect
/// instead of a constraint hiding it.
pub mod billing_schema {
    /// PostgreSQL.
    pub const POSTGRES: &str = "
CREATE TABLE IF NOT EXISTS billing_invoices (
    id VARCHAR(36) PRIMARY KEY,
    order_id VARCHAR(36) NOT NULL,
    customer VARCHAR(200) NOT NULL,
    amount_cents BIGINT NOT NULL,
    event_id VARCHAR(36) NOT NULL,
    created_at_us BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS billing_invoices_order ON billing_invoices (order_id);
CREATE TABLE IF NOT EXISTS billing_invoice_lines (
    id VARCHAR(36) PRIMARY KEY,
    order_id VARCHAR(36) NOT NULL,
    line_no INT NOT NULL,
    amount_cents BIGINT NOT NULL,
    event_id VARCHAR(36) NOT NULL
);
CREATE INDEX IF NOT EXISTS billing_invoice_lines_order ON billing_invoice_lines (order_id);";
    /// MySQL and MariaDB.
    pub const MYSQL: &str = "
CREATE TABLE IF NOT EXISTS billing_invoices (
    id VARCHAR(36) PRIMARY KEY,
    order_id VARCHAR(36) NOT NULL,
    customer VARCHAR(200) NOT NULL,
    amount_cents BIGINT NOT NULL,
    event_id VARCHAR(36) NOT NULL,
    created_at_us BIGINT NOT NULL,
    INDEX billing_invoices_order (order_id)
);
CREATE TABLE IF NOT EXISTS billing_invoice_lines (
    id VARCHAR(36) PRIMARY KEY,
    order_id VARCHAR(36) NOT NULL,
    line_no INT NOT NULL,
    amount_cents BIGINT NOT NULL,
    event_id VARCHAR(36) NOT NULL,
    INDEX billing_invoice_lines_order (order_id)
);";
}

/// A query of the database's clock in microseconds since the epoch: both services stamp their
/// rows with it, so the commit-to-invoice delay is measured on one clock.
pub mod clock {
    /// PostgreSQL: the time of the statement, not of the transaction's start (`now()`).
    pub const POSTGRES: &str = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)";
    /// MySQL and MariaDB.
    pub const MYSQL: &str = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";
}

/// Where the events go: `kafka://host:port[,host:port…]` or `amqp://…` / `amqps://…`.
#[derive(Clone, PartialEq, Eq)]
pub enum BrokerUrl {
    /// Kafka, by its bootstrap servers.
    Kafka(String),
    /// RabbitMQ, by its AMQP URL.
    Amqp(String),
}

impl FromStr for BrokerUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        if let Some(bootstrap) = url.strip_prefix("kafka://") {
            if bootstrap.is_empty() {
                return Err("BROKER_URL kafka:// names no bootstrap server".to_owned());
            }
            Ok(Self::Kafka(bootstrap.to_owned()))
        } else if url.starts_with("amqp://") || url.starts_with("amqps://") {
            Ok(Self::Amqp(url.to_owned()))
        } else {
            Err("BROKER_URL must start with kafka:// (Kafka) or amqp:// / amqps:// (RabbitMQ)".to_owned())
        }
    }
}

/// The URL with any password hidden.
impl fmt::Display for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kafka(bootstrap) => write!(f, "kafka://{bootstrap}"),
            Self::Amqp(url) => f.write_str(&oncebox::redact::redact_url(url)),
        }
    }
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Creates each Kafka topic that does not exist yet, with `partitions` partitions. A broker need
/// not create topics on first use, and a producer waiting for a missing topic's metadata would
/// hold its batch until the emergency timeout.
pub async fn ensure_kafka_topics(bootstrap: &str, topics: &[String], partitions: i32) -> Result<(), Failure> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::types::RDKafkaErrorCode;

    if topics.is_empty() {
        return Ok(());
    }
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let wanted: Vec<NewTopic<'_>> =
        topics.iter().map(|topic| NewTopic::new(topic, partitions, TopicReplication::Fixed(1))).collect();
    for result in admin.create_topics(&wanted, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("creating Kafka topic {name}: {code}").into()),
        }
    }
    Ok(())
}

/// A Prometheus recorder with oncebox's histogram buckets, installed as the process's `metrics`
/// recorder; the handle renders the scrape.
pub fn install_prometheus() -> Result<PrometheusHandle, Failure> {
    let recorder = oncebox::metrics::prometheus_builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|error| format!("installing the metrics recorder: {error}"))?;
    Ok(handle)
}

/// Whether the service is fit for traffic, as `/health` reports it.
pub type HealthCheck = Arc<dyn Fn() -> Health + Send + Sync>;

/// What `/health` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// The oncebox engine's state (`running`, `idle`, `failed: …`).
    pub state: String,
    /// Whether the service can do its work.
    pub ok: bool,
}

impl Health {
    /// A service whose work is the engine's: ready while its pollers run (or, for a service
    /// without pollers, while it idles), not while it starts, stops or has failed.
    pub fn of_engine(state: &Lifecycle) -> Self {
        Self { state: state.to_string(), ok: matches!(state, Lifecycle::Running | Lifecycle::Idle) }
    }
}

/// `/health` (200 or 503 with the state) and `/metrics` (the Prometheus scrape).
pub fn ops_router(health: HealthCheck, scrape: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/health",
            get(move || {
                let health = health();
                async move {
                    let status = if health.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                    (status, axum::Json(health))
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = scrape.render();
                async move { ([("content-type", "text/plain; version=0.0.4")], body).into_response() }
            }),
        )
}

/// Binds `listen`, prints `listening on <address>` (the port when `listen` asked for port 0),
/// and serves `router` until `shutdown` resolves.
pub async fn serve(
    listen: &str,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Failure> {
    let address: SocketAddr =
        listen.parse().map_err(|error| format!("LISTEN_ADDR '{listen}' is not an address: {error}"))?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM (what a container runtime sends first).
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// What a traffic run found: the generator prints it and writes it as JSON (`--report-json`).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's tag, the customer of every order it placed.
    pub run: String,
    /// Orders sent.
    pub sent: u64,
    /// Orders the service answered 201.
    pub accepted: u64,
    /// Orders refused or unanswered.
    pub errors: u64,
    /// Accepted orders missing from `shop_orders`.
    pub orders_missing: u64,
    /// Orders without an invoice, or with fewer invoice lines than lines, after the grace period.
    pub not_invoiced: u64,
    /// Orders with two or more invoices, or more invoice lines than lines.
    pub invoiced_twice: u64,
    /// The commit-to-invoice delay's median, in milliseconds.
    pub delay_ms_p50: Option<f64>,
    /// Its 99th percentile.
    pub delay_ms_p99: Option<f64>,
    /// Its maximum.
    pub delay_ms_max: Option<f64>,
}

impl RunReport {
    /// Whether the accounting holds: orders were accepted, and each is in the shop with exactly
    /// one invoice and every line invoiced once.
    pub fn ok(&self) -> bool {
        self.accepted > 0 && self.orders_missing == 0 && self.not_invoiced == 0 && self.invoiced_twice == 0
    }
}

/// The exit code of a service's `main`: success, or the error on stderr under the service's name.
pub fn exit(service: &str, result: Result<(), Failure>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{service} failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How long a service waits for in-flight work at shutdown.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(20);

#[cfg(test)]
mod tests {
    use super::*;

    fn order(lines: Vec<NewLine>) -> NewOrder {
        NewOrder { customer: "ada".into(), lines }
    }

    fn line(quantity: i32, price_cents: i64) -> NewLine {
        NewLine { sku: "sku-1".into(), quantity, price_cents }
    }

    #[test]
    fn an_order_is_totalled_or_refused_naming_the_field() {
        assert_eq!(order(vec![line(2, 150), line(1, 1)]).validate(), Ok(301));
        let refused = |order: NewOrder| order.validate().err().unwrap_or_default();
        assert!(refused(order(vec![])).contains("1 to 100 lines"));
        assert!(refused(order(vec![line(0, 1)])).contains("lines[0].quantity"));
        assert!(refused(order(vec![line(1, 1), line(1, -5)])).contains("lines[1].price_cents"));
        assert!(refused(NewOrder { customer: String::new(), lines: vec![line(1, 1)] }).contains("customer"));
        let most = order((0..MAX_LINES).map(|_| line(10_000, 100_000_000)).collect());
        assert_eq!(most.validate(), Ok(100 * 10_000 * 100_000_000));
    }

    #[test]
    fn a_broker_url_names_its_broker_and_hides_its_password() {
        assert_eq!("kafka://a:9092,b:9092".parse(), Ok(BrokerUrl::Kafka("a:9092,b:9092".into())));
        let amqp: Result<BrokerUrl, _> = "amqp://guest:s3cret@rabbit:5672/%2f".parse();
        let shown = amqp.map(|url| format!("{url} {url:?}")).unwrap_or_default();
        assert!(shown.contains("rabbit:5672") && !shown.contains("s3cret"), "{shown}");
        assert!("kafka://".parse::<BrokerUrl>().is_err());
        let wrong = "redis://host".parse::<BrokerUrl>().err().unwrap_or_default();
        assert!(wrong.contains("BROKER_URL"), "{wrong}");
    }

    #[test]
    fn a_database_url_names_its_database_without_repeating_it() {
        assert!(matches!(Database::of_url("postgres://u@h/db", "DATABASE_URL"), Ok(Database::Postgres)));
        assert!(matches!(Database::of_url("mysql://root@h/db", "DATABASE_URL"), Ok(Database::MySql)));
        let wrong = Database::of_url("sqlite://secret-path", "DATABASE_URL").err().map(|e| e.to_string());
        let wrong = wrong.unwrap_or_default();
        assert!(wrong.contains("DATABASE_URL") && !wrong.contains("secret-path"), "{wrong}");
    }

    #[test]
    fn health_is_ok_only_while_the_engine_works() {
        assert!(Health::of_engine(&Lifecycle::Running).ok);
        assert!(Health::of_engine(&Lifecycle::Idle).ok);
        for state in
            [Lifecycle::Starting, Lifecycle::Stopping, Lifecycle::Stopped, Lifecycle::Failed("x".into())]
        {
            assert!(!Health::of_engine(&state).ok, "{state}");
        }
    }
}
