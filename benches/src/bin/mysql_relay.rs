//! MySQL/MariaDB relay benchmark, in one run on one database (`ONCEBOX_MYSQL_URL`):
//!
//! 1. the raw ceiling: a hand-written claim + settle loop (no broker, no engine) draining a
//!    pre-filled backlog: `SELECT … FOR UPDATE SKIP LOCKED` + `UPDATE … IN (…)` in one transaction,
//!    then `UPDATE … SET status = 'PROCESSED'`, with one worker and with two;
//! 2. the engine draining the same backlog into the in-memory broker, one instance, with one claim
//!    loop for the event type and with two (`concurrency: 2`);
//! 3. publish overhead, interleaved: (A) a business insert, (B) A plus a hand-written outbox
//!    insert, (C) A plus `Publisher::publish`.
//!
//! Every drain starts from the same backlog (reset to PENDING in place). All tables live under a
//! fresh prefix and are dropped at the end.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox_benches::{
    BenchPayload, BenchResult, EVENT_TYPE, Summary, bench_event, fresh_name, per_second, print_ratios,
    print_variants, run_against,
};
use oncebox_core::config::{Config, EventSettings};
use oncebox_core::engine::{Engine, EngineParts};
use oncebox_core::{Dialect, NewOutboxEvent, OutboxWriter, Publisher, SchemaPlan, TableNames};
use oncebox_mysql::{MySqlDialect, connect_options, pool_options};
use oncebox_testkit::MemoryBroker;
use sqlx::{AssertSqlSafe, MySqlPool, Row};
use uuid::Uuid;

const URL_VARIABLE: &str = "ONCEBOX_MYSQL_URL";
const URL_EXAMPLE: &str = "mysql://root@127.0.0.1:3306/test";
const TOPIC: &str = "bench-topic";
const PREFILL_BATCH: usize = 5_000;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);

/// Command-line arguments.
#[derive(Parser, Debug)]
struct Args {
    /// Events in the backlog each drain empties.
    #[arg(long, default_value_t = 200_000)]
    events: u64,
    /// Rows per claim, for the raw loop and the engine alike.
    #[arg(long, default_value_t = 500)]
    batch_size: u32,
    /// Iterations per publish-overhead variant.
    #[arg(long, default_value_t = 3_000)]
    iterations: usize,
}

fn main() -> Result<(), Box<dyn Error>> {
    run_against(URL_VARIABLE, URL_EXAMPLE, Args::parse(), run)
}

struct Bench {
    pool: MySqlPool,
    dialect: MySqlDialect,
    tables: TableNames,
}

impl Bench {
    async fn execute(&self, sql: String) -> BenchResult<u64> {
        Ok(sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await?.rows_affected())
    }
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    let pool = pool_options().max_connections(8).connect_with(connect_options(&url)?).await?;
    let tables = TableNames::with_prefix(&fresh_name("bench_"))?;
    let dialect = MySqlDialect::new(pool.clone()).with_tables(&tables);
    let server = dialect.check_server().await?;
    println!(
        "# MySQL/MariaDB relay benchmark\n\nserver: {}, events: {}, batch size: {}",
        server.text, args.events, args.batch_size
    );
    dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
    let bench = Bench { pool, dialect, tables };
    let outcome = phases(&bench, &args).await;
    let orders = format!("{}orders", bench.tables.prefix());
    for table in [
        bench.tables.events(),
        bench.tables.dlq(),
        bench.tables.consumed(),
        bench.tables.jobs(),
        orders.as_str(),
    ] {
        bench.execute(format!("DROP TABLE IF EXISTS {table}")).await?;
    }
    outcome
}

async fn phases(bench: &Bench, args: &Args) -> BenchResult<()> {
    prefill(bench, args.events).await?;
    println!("\n## Drains\n\n| drain | events | seconds | events/s |\n|---|---:|---:|---:|");
    let mut raw_rates = Vec::new();
    for workers in [1, 2] {
        reset_backlog(bench).await?;
        let elapsed = raw_drain(bench, workers, args.batch_size, args.events).await?;
        let rate = per_second(args.events, elapsed);
        raw_rates.push(rate);
        println!(
            "| raw claim + settle, {workers} worker(s) | {} | {:.2} | {rate:.0} |",
            args.events,
            elapsed.as_secs_f64()
        );
    }
    for concurrency in [1, 2] {
        reset_backlog(bench).await?;
        let elapsed = engine_drain(bench, args, concurrency).await?;
        let engine_rate = per_second(args.events, elapsed);
        println!(
            "| engine → in-memory broker, 1 instance, concurrency {concurrency} | {} | {:.2} | {engine_rate:.0} |",
            args.events,
            elapsed.as_secs_f64()
        );
        println!(
            "\nconcurrency {concurrency}: engine / raw (1 worker): {:.3}; engine / raw (2 workers): {:.3}\n",
            engine_rate / raw_rates[0],
            engine_rate / raw_rates[1]
        );
    }
    publish_overhead(bench, args.iterations).await
}

async fn prefill(bench: &Bench, events: u64) -> BenchResult<()> {
    let writer = bench.dialect.writer();
    let mut written = 0u64;
    while written < events {
        let count = (events - written).min(PREFILL_BATCH as u64);
        let batch: Vec<NewOutboxEvent> =
            (written..written + count).map(|order| bench_event(EVENT_TYPE, order)).collect();
        let mut tx = bench.pool.begin().await?;
        writer.write(&mut tx, &batch).await?;
        tx.commit().await?;
        written += count;
    }
    Ok(())
}

async fn reset_backlog(bench: &Bench) -> BenchResult<()> {
    bench
        .execute(format!(
            "UPDATE {} SET status = 'PENDING', claim_token = NULL, attempts = 0, processed_at = NULL, \
             next_retry_at = created_at, updated_at = created_at",
            bench.tables.events()
        ))
        .await?;
    bench.execute(format!("ANALYZE TABLE {}", bench.tables.events())).await?;
    Ok(())
}

/// The hand-written loop: what any relay on this schema must do at least.
async fn raw_drain(bench: &Bench, workers: usize, batch_size: u32, events: u64) -> BenchResult<Duration> {
    let table = bench.tables.events().to_owned();
    let index = format!("{}outbox_events_claim", bench.tables.prefix());
    let drained = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let pool = bench.pool.clone();
        let (table, index, drained) = (table.clone(), index.clone(), drained.clone());
        tasks.push(tokio::spawn(async move {
            let select = format!(
                "SELECT id, event_type, payload, payload_type, headers, partition_key, attempts, created_at \
                 FROM {table} FORCE INDEX ({index}) \
                 WHERE event_type = ? AND status = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6) \
                 ORDER BY next_retry_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
            );
            loop {
                let mut tx = pool.begin().await?;
                let rows = sqlx::query(AssertSqlSafe(select.clone())).bind(EVENT_TYPE).bind(batch_size).fetch_all(&mut *tx).await?;
                if rows.is_empty() {
                    tx.commit().await?;
                    if drained.load(Ordering::Relaxed) >= events {
                        return Ok::<_, sqlx::Error>(());
                    }
                    continue;
                }
                let mut ids = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: Uuid = row.try_get("id")?;
                    let _payload: String = row.try_get("payload")?;
                    ids.push(id);
                }
                let list = vec!["?"; ids.len()].join(", ");
                let token = Uuid::now_v7();
                let mut claim = sqlx::query(AssertSqlSafe(format!(
                    "UPDATE {table} SET status = 'IN_PROCESS', claim_token = ?, updated_at = UTC_TIMESTAMP(6) WHERE id IN ({list})"
                )))
                .bind(token);
                for id in &ids {
                    claim = claim.bind(*id);
                }
                claim.execute(&mut *tx).await?;
                tx.commit().await?;
                let mut settle = sqlx::query(AssertSqlSafe(format!(
                    "UPDATE {table} SET status = 'PROCESSED', attempts = attempts + 1, processed_at = UTC_TIMESTAMP(6), \
                     updated_at = UTC_TIMESTAMP(6), claim_token = NULL WHERE claim_token = ? AND id IN ({list})"
                )))
                .bind(token);
                for id in &ids {
                    settle = settle.bind(*id);
                }
                settle.execute(&pool).await?;
                drained.fetch_add(ids.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// One engine, its event type with `concurrency` claim loops, into the in-memory broker.
async fn engine_drain(bench: &Bench, args: &Args, concurrency: u32) -> BenchResult<Duration> {
    let broker = MemoryBroker::new();
    let polling = oncebox_testkit::engine_suite::fast_polling();
    let settings =
        EventSettings::new(TOPIC).batch_size(args.batch_size).concurrency(concurrency).polling(polling);
    let config = Config::builder().event(EVENT_TYPE, settings).build()?;
    let mut parts = EngineParts::with_dialect(config, &bench.dialect);
    parts.sender = Some(Arc::new(broker));
    let started = Instant::now();
    let engine = Engine::start(parts)?;
    let processed_sql = format!("SELECT COUNT(*) FROM {} WHERE status = 'PROCESSED'", bench.tables.events());
    let elapsed = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if engine.stats().delivered >= args.events {
            // Delivered, with at most one batch still being settled: wait for the table to agree.
            loop {
                let (processed,): (i64,) =
                    sqlx::query_as(AssertSqlSafe(processed_sql.clone())).fetch_one(&bench.pool).await?;
                if u64::try_from(processed).unwrap_or_default() >= args.events {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            break started.elapsed();
        }
        if started.elapsed() > DRAIN_TIMEOUT {
            return Err("the engine drain did not finish in time".into());
        }
    };
    engine.shutdown(Duration::from_secs(30)).await?;
    Ok(elapsed)
}

async fn publish_overhead(bench: &Bench, iterations: usize) -> BenchResult<()> {
    let orders = format!("{}orders", bench.tables.prefix());
    bench.execute(format!("TRUNCATE TABLE {}", bench.tables.events())).await?;
    bench
        .execute(format!(
            "CREATE TABLE {orders} (id BINARY(16) NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, \
             amount BIGINT NOT NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB"
        ))
        .await?;
    let business = format!("INSERT INTO {orders} (id, customer, amount) VALUES (?, ?, ?)");
    let outbox = format!(
        "INSERT INTO {} (id, event_type, payload, payload_type, headers, partition_key, status, attempts, \
         next_retry_at, created_at, updated_at) VALUES (?, ?, ?, ?, '{{}}', NULL, 'PENDING', 0, \
         UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
        bench.tables.events()
    );
    let publisher = Publisher::new(bench.dialect.writer(), [EVENT_TYPE.to_owned()]);
    let mut connection = bench.pool.acquire().await?;
    let labels = ["A: business insert", "B: A + hand-written outbox insert", "C: A + Publisher::publish"];
    let mut samples: Vec<Vec<Duration>> = (0..3).map(|_| Vec::with_capacity(iterations)).collect();
    let mut order = 0u64;
    for round in 0..(50 + iterations) {
        for offset in 0..3 {
            let variant = (round + offset) % 3;
            let payload = BenchPayload::new(order);
            order += 1;
            let started = Instant::now();
            let mut tx = sqlx::Connection::begin(&mut *connection).await?;
            sqlx::query(AssertSqlSafe(business.clone()))
                .bind(Uuid::now_v7())
                .bind(payload.customer.clone())
                .bind(i64::try_from(order).unwrap_or_default())
                .execute(&mut *tx)
                .await?;
            match variant {
                1 => {
                    sqlx::query(AssertSqlSafe(outbox.clone()))
                        .bind(Uuid::now_v7())
                        .bind(EVENT_TYPE)
                        .bind(payload.to_json())
                        .bind("BenchPayload")
                        .execute(&mut *tx)
                        .await?;
                }
                2 => {
                    publisher.publish(&mut tx, EVENT_TYPE, &payload).await?;
                }
                _ => {}
            }
            tx.commit().await?;
            if round >= 50 {
                samples[variant].push(started.elapsed());
            }
        }
    }
    let summaries: Vec<Summary> = samples.iter().map(|s| Summary::of(s)).collect();
    println!(
        "\n## Publish overhead: {iterations} iterations per variant, interleaved, after 50 warm-up rounds"
    );
    print_variants(labels.iter().copied(), &summaries);
    print_ratios(&summaries, &[("B/A", 1, 0), ("C/A", 2, 0), ("C/B", 2, 1)]);
    Ok(())
}
