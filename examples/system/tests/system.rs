//! The example system end to end on the real servers: the orders service, the billing service and
//! the traffic generator as the binaries a deployment runs, on a fresh database per case.
//!
//! Each case starts both services (any free port, each printing the one it got), waits for their
//! `/health`, runs the generator for ten seconds and takes its accounting: every accepted order is
//! in the shop with exactly one invoice and all its lines invoiced once, no request failed. Then
//! it checks that the accounting can fail (an invoice doubled by hand makes `--verify-run` exit
//! 1), that both `/metrics` carry oncebox's series, that the DLQ API refuses a caller without its
//! token, and that both services stop cleanly on SIGTERM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use oncebox_example_system::RunReport;
use oncebox_testkit::eventually;
use oncebox_testkit::runner::{Failed, TestResult, fail, test_server_missing};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const ORDERS: &str = env!("CARGO_BIN_EXE_orders-service");
const BILLING: &str = env!("CARGO_BIN_EXE_billing-service");
const GENERATOR: &str = env!("CARGO_BIN_EXE_traffic-generator");
const OPERATOR_TOKEN: &str = "system-test-operator-token";
/// How long a service may take to start and report healthy.
const START: Duration = Duration::from_secs(90);

#[derive(Clone, Copy)]
enum Db {
    Postgres,
    MySql,
}

#[derive(Clone, Copy)]
enum Broker {
    Kafka,
    Rabbit,
}

impl Db {
    fn variable(self) -> &'static str {
        match self {
            Self::Postgres => "ONCEBOX_PG_URL",
            Self::MySql => "ONCEBOX_MYSQL_URL",
        }
    }
}

impl Broker {
    fn variable(self) -> &'static str {
        match self {
            Self::Kafka => "ONCEBOX_KAFKA_BOOTSTRAP",
            Self::Rabbit => "ONCEBOX_AMQP_URL",
        }
    }

    fn url(self, value: &str) -> String {
        match self {
            Self::Kafka => format!("kafka://{}", value.trim_start_matches("kafka://")),
            Self::Rabbit => value.to_owned(),
        }
    }
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> Result<String, Failed> {
    let (base, query) = url.split_once('?').map_or((url, None), |(base, query)| (base, Some(query)));
    let authority_end = base.find("://").map(|scheme| scheme + 3).ok_or_else(|| fail("a URL without ://"))?;
    let path_start = base[authority_end..].find('/').map_or(base.len(), |slash| authority_end + slash);
    let mut replaced = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        replaced.push('?');
        replaced.push_str(query);
    }
    Ok(replaced)
}

/// A database of its own for one case, dropped at the end.
struct FreshDatabase {
    db: Db,
    server: String,
    name: String,
    url: String,
}

impl FreshDatabase {
    async fn create(db: Db, server: &str) -> Result<Self, Failed> {
        let name = format!("oncebox_system_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let create = format!("CREATE DATABASE {name}");
        Self::execute(db, server, &create).await?;
        Ok(Self { db, server: server.to_owned(), url: with_database(server, &name)?, name })
    }

    async fn execute(db: Db, server: &str, statement: &str) -> TestResult {
        let statement = sqlx::AssertSqlSafe(statement.to_owned());
        match db {
            Db::Postgres => {
                let pool = sqlx::PgPool::connect(server).await.map_err(fail)?;
                sqlx::raw_sql(statement).execute(&pool).await.map_err(fail)?;
                pool.close().await;
            }
            Db::MySql => {
                let pool = sqlx::MySqlPool::connect(server).await.map_err(fail)?;
                sqlx::raw_sql(statement).execute(&pool).await.map_err(fail)?;
                pool.close().await;
            }
        }
        Ok(())
    }

    /// The number `query` (a `SELECT COUNT(*)`) answers in the fresh database.
    async fn count(&self, query: &'static str) -> Result<i64, Failed> {
        match self.db {
            Db::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await.map_err(fail)?;
                let count = sqlx::query_scalar(query).fetch_one(&pool).await.map_err(fail);
                pool.close().await;
                count
            }
            Db::MySql => {
                let pool = sqlx::MySqlPool::connect(&self.url).await.map_err(fail)?;
                let count = sqlx::query_scalar(query).fetch_one(&pool).await.map_err(fail);
                pool.close().await;
                count
            }
        }
    }

    /// Runs `statement` in the fresh database.
    async fn run(&self, statement: &str) -> TestResult {
        Self::execute(self.db, &self.url, statement).await
    }

    async fn drop(self) -> TestResult {
        let statement = match self.db {
            Db::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            Db::MySql => format!("DROP DATABASE IF EXISTS {}", self.name),
        };
        Self::execute(self.db, &self.server, &statement).await
    }
}

/// A running service and the address it printed.
struct Service {
    name: &'static str,
    child: Child,
    address: String,
}

impl Service {
    async fn start(name: &'static str, program: &str, env: &[(&str, String)]) -> Result<Self, Failed> {
        let mut command = Command::new(program);
        command
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|error| fail(format!("starting {name}: {error}")))?;
        let stdout = child.stdout.take().ok_or_else(|| fail(format!("{name}: no stdout")))?;
        let mut lines = BufReader::new(stdout).lines();
        let address = tokio::time::timeout(START, async {
            while let Some(line) = lines.next_line().await.map_err(fail)? {
                if let Some(address) = line.strip_prefix("listening on ") {
                    return Ok(address.to_owned());
                }
            }
            Err(fail(format!("{name} exited before it listened")))
        })
        .await
        .map_err(|_| fail(format!("{name} printed no address within {START:?}")))??;
        // Keep reading so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { name, child, address })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    async fn healthy(&self, client: &reqwest::Client) -> TestResult {
        eventually(&format!("{} healthy", self.name), START, || async {
            Ok(client.get(self.url("/health")).send().await.is_ok_and(|response| response.status() == 200))
        })
        .await
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> Result<(u16, String), Failed> {
        let response = client.get(self.url(path)).send().await.map_err(fail)?;
        let status = response.status().as_u16();
        Ok((status, response.text().await.map_err(fail)?))
    }

    /// SIGTERM, then the exit status must be success.
    async fn stop(mut self) -> TestResult {
        let pid = self.child.id().ok_or_else(|| fail(format!("{} already exited", self.name)))?;
        let signalled =
            Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await.map_err(fail)?;
        if !signalled.success() {
            return Err(fail(format!("kill -TERM {pid} ({}) failed", self.name)));
        }
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .map_err(|_| fail(format!("{} did not stop within 60 s of SIGTERM", self.name)))?
            .map_err(fail)?;
        if status.success() { Ok(()) } else { Err(fail(format!("{} stopped with {status}", self.name))) }
    }
}

/// The committed configuration of `service`, its topic renamed for this case.
fn config(directory: &Path, service: &str, topic: &str) -> Result<PathBuf, Failed> {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(format!("{service}.yaml"));
    let text = std::fs::read_to_string(&committed).map_err(fail)?;
    let path = directory.join(format!("{service}.yaml"));
    std::fs::write(&path, text.replace("topic: shop.orders", &format!("topic: {topic}"))).map_err(fail)?;
    Ok(path)
}

async fn generator(args: &[&str], database_url: &str) -> Result<(Option<i32>, String), Failed> {
    let output = Command::new(GENERATOR)
        .args(args)
        .env("DATABASE_URL", database_url)
        .stderr(Stdio::inherit())
        .output()
        .await
        .map_err(fail)?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}");
    Ok((output.status.code(), stdout))
}

async fn system(db: Db, broker: Broker) -> TestResult {
    let case = format!(
        "system::{}_{}",
        match db {
            Db::Postgres => "postgres",
            Db::MySql => "mysql",
        },
        match broker {
            Broker::Kafka => "kafka",
            Broker::Rabbit => "rabbitmq",
        }
    );
    let Ok(server) = std::env::var(db.variable()) else {
        return test_server_missing(&case, db.variable());
    };
    let Ok(broker_value) = std::env::var(broker.variable()) else {
        return test_server_missing(&case, broker.variable());
    };
    let database = FreshDatabase::create(db, &server).await?;
    let result = run_case(&case, &database, &broker.url(&broker_value)).await;
    let dropped = database.drop().await;
    result?;
    dropped
}

async fn run_case(case: &str, database: &FreshDatabase, broker_url: &str) -> TestResult {
    // The broker's names are the case's (and the database's) own, so cases and reruns share nothing.
    let topic = format!("{}.orders", database.name);
    let group = format!("{}.billing", database.name);
    let directory = std::env::temp_dir().join(&database.name);
    std::fs::create_dir_all(&directory).map_err(fail)?;
    let common = [("DATABASE_URL", database.url.clone()), ("BROKER_URL", broker_url.to_owned())];

    let mut billing_env = common.to_vec();
    billing_env.push(("ONCEBOX_CONFIG", config(&directory, "billing", &topic)?.display().to_string()));
    billing_env.push(("ORDERS_TOPIC", topic.clone()));
    billing_env.push(("BILLING_CONSUMER_GROUP", group.clone()));
    let billing = Service::start("billing-service", BILLING, &billing_env).await?;
    let mut orders_env = common.to_vec();
    orders_env.push(("ONCEBOX_CONFIG", config(&directory, "orders", &topic)?.display().to_string()));
    orders_env.push(("DLQ_OPERATOR_TOKEN", OPERATOR_TOKEN.to_owned()));
    let orders = Service::start("orders-service", ORDERS, &orders_env).await?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().map_err(fail)?;
    billing.healthy(&client).await?;
    orders.healthy(&client).await?;
    first_order_invoiced(&orders, &client, database).await?;

    // Ten seconds of traffic, then the generator's accounting.
    let report_path = directory.join("report.json");
    let report_arg = report_path.display().to_string();
    let orders_url = orders.url("");
    let (code, stdout) = generator(
        &[
            "--orders-url",
            &orders_url,
            "--rate",
            "20",
            "--duration",
            "10s",
            "--grace",
            "90s",
            "--report-json",
            &report_arg,
        ],
        &database.url,
    )
    .await?;
    assert_eq!(code, Some(0), "{case}: the generator's accounting failed:\n{stdout}");
    let report: RunReport =
        serde_json::from_slice(&std::fs::read(&report_path).map_err(fail)?).map_err(fail)?;
    assert!(report.accepted >= 50, "{case}: too few orders to account for: {report:?}");
    assert_eq!(report.sent, report.accepted, "{case}: {report:?}");
    assert_eq!(report.errors, 0, "{case}: {report:?}");
    assert_eq!((report.orders_missing, report.not_invoiced, report.invoiced_twice), (0, 0, 0), "{case}");
    assert!(report.delay_ms_max.is_some(), "{case}: no delay measured: {report:?}");

    // The accounting can fail: an invoice doubled by hand is reported and the exit code says so.
    database
        .run(&format!(
            "INSERT INTO billing_invoices (id, order_id, customer, amount_cents, event_id, created_at_us) \
             SELECT 'doubled-by-hand', order_id, customer, amount_cents, event_id, created_at_us \
             FROM billing_invoices WHERE customer = '{}' ORDER BY order_id LIMIT 1",
            report.run
        ))
        .await?;
    let (code, stdout) = generator(&["--verify-run", &report.run, "--grace", "0s"], &database.url).await?;
    assert_eq!(code, Some(1), "{case}: a doubled invoice went unnoticed:\n{stdout}");
    assert!(stdout.contains("invoiced twice: 2 invoices"), "{case}:\n{stdout}");

    // Operations: both scrapes carry oncebox's series; the DLQ API wants its token.
    let (status, scrape) = orders.get(&client, "/metrics").await?;
    assert_eq!(status, 200, "{case}");
    assert!(scrape.contains("oncebox_task_runs_total{"), "{case}: orders scrape:\n{scrape}");
    let (status, scrape) = billing.get(&client, "/metrics").await?;
    assert_eq!(status, 200, "{case}");
    assert!(
        scrape.contains("oncebox_inbox_events_total{consumer=\"billing\",outcome=\"consumed\"}"),
        "{case}: billing scrape:\n{scrape}"
    );
    assert_eq!(orders.get(&client, "/dlq/events").await?.0, 401, "{case}: the DLQ API without a token");
    let counted =
        client.get(orders.url("/dlq/events/count")).bearer_auth(OPERATOR_TOKEN).send().await.map_err(fail)?;
    assert_eq!(counted.status(), 200, "{case}");
    assert_eq!(counted.text().await.map_err(fail)?, r#"{"count":0}"#, "{case}: dead letters after the run");

    let stopped = (orders.stop().await, billing.stop().await);
    let _ = std::fs::remove_dir_all(&directory);
    stopped.0?;
    stopped.1
}

/// Places one order and waits until billing has invoiced it: on RabbitMQ, mandatory publishing
/// reports an event unroutable until billing's queue is bound, and the relay's retry backoff
/// should not be part of the delay the traffic measures.
async fn first_order_invoiced(
    orders: &Service,
    client: &reqwest::Client,
    database: &FreshDatabase,
) -> TestResult {
    let probe = serde_json::json!({
        "customer": "first-order-probe",
        "lines": [{ "sku": "probe", "quantity": 1, "price_cents": 1 }],
    });
    let response = client.post(orders.url("/orders")).json(&probe).send().await.map_err(fail)?;
    assert_eq!(response.status(), 201, "the probe order");
    eventually("the probe order invoiced", START, || async {
        let invoices = database
            .count("SELECT COUNT(*) FROM billing_invoices WHERE customer = 'first-order-probe'")
            .await?;
        Ok(invoices == 1)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_with_kafka() -> TestResult {
    system(Db::Postgres, Broker::Kafka).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_with_rabbitmq() -> TestResult {
    system(Db::Postgres, Broker::Rabbit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_with_rabbitmq() -> TestResult {
    system(Db::MySql, Broker::Rabbit).await
}
