//! The traffic generator: places orders through `POST /orders` at a rate for a while, printing a
//! progress line each second, then accounts by reading the shop's and billing's tables:
//!
//! * every order the service accepted is in `shop_orders`;
//! * within the grace period each has exactly one invoice, and one invoice line per order line;
//! * the delay from the order's row to its invoice's row, both stamped by the database's clock
//!   (p50, p99, max).
//!
//! It exits with 1 when an order has no invoice (or lacks lines) after the grace period, when an
//! order has two invoices (or a line invoiced twice), or when no order was accepted at all.
//! Every order of a run carries the run's tag as its customer, so `--verify-run <tag>` checks an
//! earlier run again without sending anything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox_example_system::{Database, Failure, NewLine, NewOrder, OrderView, RunReport};
use tokio::sync::Semaphore;

#[derive(Parser)]
#[command(about = "Drives the orders service and checks that billing invoiced every order once")]
struct Args {
    /// The orders service.
    #[arg(long, env = "ORDERS_URL", default_value = "http://127.0.0.1:8080")]
    orders_url: String,
    /// The database that holds the shop's and billing's tables.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Orders per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// How long to send, e.g. `10s`, `2m`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// How long to wait after the last order for billing to catch up.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Send nothing: check the orders of an earlier run, by the tag it printed.
    #[arg(long)]
    verify_run: Option<String>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    report_json: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(report) if report.ok() => {
            println!("ok: every accepted order invoiced exactly once");
            ExitCode::SUCCESS
        }
        Ok(_) => {
            println!("NOT OK: see the accounting above");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("traffic-generator failed: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<RunReport, Failure> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err(
            format!("--rate must be a positive number of orders per second, not {}", args.rate).into()
        );
    }
    if args.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    let database = Database::of_url(&args.database_url, "DATABASE_URL")?;
    let ledger = Ledger::connect(database, &args.database_url).await?;
    let (run, accepted_ids, mut report) = match &args.verify_run {
        Some(run) => {
            let ids = ledger.orders_of(run).await?.into_keys().collect::<Vec<_>>();
            let accepted = ids.len() as u64;
            (run.clone(), ids, RunReport { accepted, ..RunReport::default() })
        }
        None => send(&args).await?,
    };
    report.run = run.clone();
    println!(
        "run {run}: sent {}, accepted {}, errors {}; waiting up to {} for billing",
        report.sent,
        report.accepted,
        report.errors,
        humantime::format_duration(args.grace)
    );

    // Billing catches up: look until every order is invoiced or the grace period is over.
    let deadline = Instant::now() + args.grace;
    let rows = loop {
        let rows = ledger.orders_of(&run).await?;
        let done = rows.values().all(|row| row.invoices >= 1 && row.invoice_lines >= row.lines);
        if done && rows.len() >= accepted_ids.len() || Instant::now() >= deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    report.orders_missing = accepted_ids.iter().filter(|id| !rows.contains_key(*id)).count() as u64;
    let mut delays = Vec::new();
    for (id, row) in &rows {
        if row.invoices == 0 || row.invoice_lines < row.lines {
            report.not_invoiced += 1;
            println!(
                "order {id}: {} invoice(s), {} of {} lines invoiced",
                row.invoices, row.invoice_lines, row.lines
            );
        }
        if row.invoices > 1 || row.invoice_lines > row.lines {
            report.invoiced_twice += 1;
            println!(
                "order {id}: invoiced twice: {} invoices, {} invoice lines for {} lines",
                row.invoices, row.invoice_lines, row.lines
            );
        }
        if let Some(invoiced_at) = row.first_invoice_us {
            delays.push((invoiced_at - row.created_us) as f64 / 1000.0);
        }
    }
    delays.sort_by(f64::total_cmp);
    report.delay_ms_p50 = percentile(&delays, 0.50);
    report.delay_ms_p99 = percentile(&delays, 0.99);
    report.delay_ms_max = delays.last().copied();
    let shown = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1} ms"));
    println!(
        "accounting: {} orders in the shop, {} missing, {} not invoiced, {} invoiced twice",
        rows.len(),
        report.orders_missing,
        report.not_invoiced,
        report.invoiced_twice
    );
    println!(
        "order commit → invoice commit: p50 {}, p99 {}, max {} ({} invoices)",
        shown(report.delay_ms_p50),
        shown(report.delay_ms_p99),
        shown(report.delay_ms_max),
        delays.len()
    );
    if let Some(path) = &args.report_json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .map_err(|error| format!("writing {}: {error}", path.display()))?;
    }
    Ok(report)
}

/// The nearest-rank percentile of sorted `values`.
fn percentile(values: &[f64], quantile: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let rank = (quantile * values.len() as f64).ceil() as usize;
    values.get(rank.clamp(1, values.len()) - 1).copied()
}

/// Sends orders for `--duration` at `--rate`; returns the run's tag, the accepted ids and the
/// counts.
async fn send(args: &Args) -> Result<(String, Vec<String>, RunReport), Failure> {
    let run = format!("traffic-{}", uuid::Uuid::new_v4().simple());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let url = format!("{}/orders", args.orders_url.trim_end_matches('/'));
    let counts = Arc::new(Counts::default());
    let accepted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut progress = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut n: u64 = 0;
    while started.elapsed() < args.duration {
        ticks.tick().await;
        let permit = permits.clone().acquire_owned().await?;
        n += 1;
        let order = order(&run, n);
        let (client, url, tally, accepted) = (client.clone(), url.clone(), counts.clone(), accepted.clone());
        tasks.spawn(async move {
            let counts = tally;
            counts.sent.fetch_add(1, Ordering::SeqCst);
            match place(&client, &url, &order).await {
                Ok(placed) => {
                    counts.accepted.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut accepted) = accepted.lock() {
                        accepted.push(placed.id.to_string());
                    }
                }
                Err(error) => {
                    if counts.errors.fetch_add(1, Ordering::SeqCst) < 5 {
                        eprintln!("POST /orders: {error}");
                    }
                }
            }
            drop(permit);
        });
        if progress.elapsed() >= Duration::from_secs(1) {
            progress = Instant::now();
            println!("{}", counts.line(started.elapsed()));
        }
    }
    while tasks.join_next().await.is_some() {}
    println!("{}", counts.line(started.elapsed()));
    let ids = accepted.lock().map(|ids| ids.clone()).unwrap_or_default();
    let report = RunReport {
        sent: counts.sent.load(Ordering::SeqCst),
        accepted: counts.accepted.load(Ordering::SeqCst),
        errors: counts.errors.load(Ordering::SeqCst),
        ..RunReport::default()
    };
    Ok((run, ids, report))
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    accepted: AtomicU64,
    errors: AtomicU64,
}

impl Counts {
    fn line(&self, elapsed: Duration) -> String {
        format!(
            "{:>5.1}s sent {} accepted {} errors {}",
            elapsed.as_secs_f64(),
            self.sent.load(Ordering::SeqCst),
            self.accepted.load(Ordering::SeqCst),
            self.errors.load(Ordering::SeqCst)
        )
    }
}

/// The `n`th order of a run: one to three lines.
fn order(run: &str, n: u64) -> NewOrder {
    let lines = (0..=(n % 3))
        .map(|line| NewLine {
            sku: format!("sku-{}", (n + line) % 50),
            quantity: i32::try_from(1 + line).unwrap_or(1),
            price_cents: 100 + i64::try_from(n % 1_000).unwrap_or(0),
        })
        .collect();
    NewOrder { customer: run.to_owned(), lines }
}

async fn place(client: &reqwest::Client, url: &str, order: &NewOrder) -> Result<OrderView, Failure> {
    let response = client.post(url).json(order).send().await?;
    let status = response.status();
    if status != reqwest::StatusCode::CREATED {
        let body = response.text().await.unwrap_or_default();
        return Err(format!("{status}: {}", body.chars().take(200).collect::<String>()).into());
    }
    Ok(response.json().await?)
}

/// One order as the tables show it.
#[derive(Debug)]
struct OrderRow {
    created_us: i64,
    lines: i64,
    invoices: i64,
    invoice_lines: i64,
    first_invoice_us: Option<i64>,
}

/// Reads both services' tables.
enum Ledger {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
}

/// The accounting query, one row per order of a run (`$1` / `?` is the run's tag).
macro_rules! accounting {
    ($tag:literal) => {
        concat!(
            "SELECT o.id, o.created_at_us,
                (SELECT COUNT(*) FROM shop_order_lines l WHERE l.order_id = o.id),
                (SELECT COUNT(*) FROM billing_invoices i WHERE i.order_id = o.id),
                (SELECT COUNT(*) FROM billing_invoice_lines il WHERE il.order_id = o.id),
                (SELECT MIN(i.created_at_us) FROM billing_invoices i WHERE i.order_id = o.id)
             FROM shop_orders o WHERE o.customer = ",
            $tag
        )
    };
}

type Row = (String, i64, i64, i64, i64, Option<i64>);

impl Ledger {
    async fn connect(database: Database, url: &str) -> Result<Self, Failure> {
        Ok(match database {
            Database::Postgres => Self::Postgres(sqlx::PgPool::connect(url).await?),
            Database::MySql => Self::MySql(sqlx::MySqlPool::connect(url).await?),
        })
    }

    /// The orders of `run`, by id.
    async fn orders_of(&self, run: &str) -> Result<BTreeMap<String, OrderRow>, Failure> {
        let rows: Vec<Row> = match self {
            Self::Postgres(pool) => sqlx::query_as(accounting!("$1")).bind(run).fetch_all(pool).await?,
            Self::MySql(pool) => sqlx::query_as(accounting!("?")).bind(run).fetch_all(pool).await?,
        };
        Ok(rows
            .into_iter()
            .map(|(id, created_us, lines, invoices, invoice_lines, first_invoice_us)| {
                (id, OrderRow { created_us, lines, invoices, invoice_lines, first_invoice_us })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.50), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_report_without_orders_is_not_ok() {
        assert!(!RunReport::default().ok());
        assert!(RunReport { accepted: 3, ..RunReport::default() }.ok());
        assert!(!RunReport { accepted: 3, invoiced_twice: 1, ..RunReport::default() }.ok());
    }

    #[test]
    fn every_order_of_a_run_is_valid_and_tagged() {
        for n in 1..=10 {
            let order = order("traffic-x", n);
            assert_eq!(order.customer, "traffic-x");
            assert!(order.validate().is_ok(), "{n}");
        }
    }
}
