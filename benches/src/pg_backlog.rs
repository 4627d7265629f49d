//! The PostgreSQL backlog the relay benchmarks drain: fresh tables, a template backlog written once
//! through the `PgWriter` and copied before every drain, and the raw claim + settle loop that is
//! the ceiling a relay is compared with: with no broker, or with a real send between claim and
//! settle ([`RawSend`]), the hand-written pipeline a team would write without oncebox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use oncebox_core::{Dialect, NewOutboxEvent, OutboxWriter, SchemaPlan, TableNames};
use oncebox_postgres::{DEFAULT_MAX_CONNECTIONS, PgDialect, connect_options};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Row};
use uuid::Uuid;

use crate::{BenchResult, EVENT_TYPE, bench_event, fresh_name};

/// Rows per transaction when the template backlog is written through the `PgWriter`.
pub const PREFILL_BATCH: usize = 5_000;

const RAW_CLAIM: &str = include_str!("../sql/raw_claim.sql");
const RAW_SETTLE: &str = include_str!("../sql/raw_settle.sql");
const COPY_BACKLOG: &str = include_str!("../sql/copy_backlog.sql");
/// The engine's own claim statement, for the raw loop's [`RawSql::Engine`] variant.
pub const ENGINE_CLAIM: &str = include_str!("../../crates/oncebox-postgres/sql/claim.sql");
/// The engine's settle statement.
pub const ENGINE_SETTLE: &str = include_str!("../../crates/oncebox-postgres/sql/settle.sql");

/// Everything one run needs: the pool, the tables and the SQL rendered for them.
pub struct Bench {
    /// The server's URL.
    pub url: String,
    /// A pool for set-up, the raw loop and checks.
    pub pool: PgPool,
    /// The tables drained.
    pub tables: TableNames,
    /// A dialect over `pool` and `tables`.
    pub dialect: PgDialect,
    /// The template backlog's tables, written once and copied before every drain.
    pub template: PgDialect,
    /// The hand-written raw claim, rendered for `tables`.
    pub raw_claim: String,
    /// The hand-written raw settle, rendered for `tables`.
    pub raw_settle: String,
}

impl Bench {
    /// Connects and names fresh tables under `<stem><8 hex digits>_` (nothing is created yet).
    pub async fn connect(url: String, stem: &str) -> BenchResult<Self> {
        let pool = PgPoolOptions::new().max_connections(8).connect_with(connect_options(&url)?).await?;
        let prefix = format!("{}_", fresh_name(stem));
        let tables = TableNames::with_prefix(&prefix)?;
        let template_tables = TableNames::with_prefix(&format!("{prefix}backlog_"))?;
        Ok(Self {
            url,
            pool: pool.clone(),
            dialect: PgDialect::new(pool.clone()).with_tables(&tables),
            template: PgDialect::new(pool).with_tables(&template_tables).with_wake_ups(false),
            raw_claim: tables.render(RAW_CLAIM),
            raw_settle: tables.render(RAW_SETTLE),
            tables,
        })
    }

    /// Creates the drained tables (outbox, DLQ, inbox, jobs) and the template's outbox table.
    pub async fn create_tables(&self) -> BenchResult<()> {
        self.dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
        self.template
            .create_schema(SchemaPlan { outbox: true, dlq: false, inbox: false, jobs: false })
            .await?;
        Ok(())
    }

    /// `template` with the table names of this run.
    pub fn sql(&self, template: &str) -> String {
        self.tables.render(template)
    }

    /// Runs `sql` (no parameters).
    pub async fn execute(&self, sql: &str) -> BenchResult<()> {
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(&self.pool).await?;
        Ok(())
    }

    /// A dialect over a pool of its own, as a separate relay process would have.
    pub async fn instance(&self) -> BenchResult<PgDialect> {
        self.instance_with_pool_size(DEFAULT_MAX_CONNECTIONS).await
    }

    /// A dialect over a pool of its own that opens at most `max_connections` connections.
    pub async fn instance_with_pool_size(&self, max_connections: u32) -> BenchResult<PgDialect> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(connect_options(&self.url)?)
            .await?;
        Ok(PgDialect::new(pool).with_tables(&self.tables).with_wake_ups(false))
    }

    /// Empties the outbox, refills it from the template backlog and runs `VACUUM ANALYZE`.
    pub async fn reset_backlog(&self, expected: u64) -> BenchResult<()> {
        self.execute(&format!("TRUNCATE {}", self.tables.events())).await?;
        let copied =
            sqlx::query(AssertSqlSafe(self.sql(COPY_BACKLOG))).execute(&self.pool).await?.rows_affected();
        if copied != expected {
            return Err(format!("backlog copy wrote {copied} rows, expected {expected}").into());
        }
        self.vacuum().await
    }

    /// `VACUUM ANALYZE` of the drained outbox table.
    pub async fn vacuum(&self) -> BenchResult<()> {
        self.execute(&format!("VACUUM ANALYZE {}", self.tables.events())).await
    }

    /// Rows not yet PROCESSED.
    pub async fn pending(&self) -> BenchResult<i64> {
        let sql = format!("SELECT count(*) FROM {} WHERE status <> 'PROCESSED'", self.tables.events());
        Ok(sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&self.pool).await?)
    }

    /// Drops every table of the run.
    pub async fn drop_everything(&self) -> BenchResult<()> {
        let names = [&self.tables, self.template.tables()]
            .iter()
            .flat_map(|tables| [tables.events(), tables.dlq(), tables.consumed(), tables.jobs()])
            .collect::<Vec<_>>()
            .join(", ");
        self.execute(&format!("DROP TABLE IF EXISTS {names}, {}orders", self.tables.prefix())).await
    }
}

/// Writes the template backlog of `events` events of [`EVENT_TYPE`] through the `PgWriter`,
/// [`PREFILL_BATCH`] per transaction.
pub async fn write_template(bench: &Bench, events: u64) -> BenchResult<()> {
    write_template_of_types(bench, events, &[EVENT_TYPE.to_owned()]).await
}

/// Writes the template backlog of `events` events through the `PgWriter`, [`PREFILL_BATCH`] per
/// transaction, the event types taken from `event_types` in turn (none given: [`EVENT_TYPE`]).
pub async fn write_template_of_types(bench: &Bench, events: u64, event_types: &[String]) -> BenchResult<()> {
    let writer = bench.template.writer();
    let mut written = 0u64;
    while written < events {
        let count = PREFILL_BATCH.min(usize::try_from(events - written).unwrap_or(PREFILL_BATCH));
        let batch: Vec<NewOutboxEvent> = (0..count)
            .map(|index| {
                let event_type = match event_types.len() {
                    0 => EVENT_TYPE,
                    types => &event_types[(written as usize + index) % types],
                };
                bench_event(event_type, written + index as u64)
            })
            .collect();
        let mut tx = bench.pool.begin().await?;
        writer.write(&mut tx, &batch).await?;
        tx.commit().await?;
        written += count as u64;
    }
    Ok(())
}

/// Fails when rows are left unprocessed after the drain named `label`.
pub async fn check_drained(bench: &Bench, label: &str) -> BenchResult<()> {
    let left = bench.pending().await?;
    if left != 0 {
        return Err(format!("{label}: {left} rows are not PROCESSED after the drain").into());
    }
    Ok(())
}

/// Which statements the raw loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RawSql {
    /// `benches/sql/raw_claim.sql` and `raw_settle.sql`.
    HandWritten,
    /// The engine's `claim.sql` and `settle.sql` from oncebox-postgres, bound by hand.
    Engine,
}

/// A claimed row as the raw loop hands it to a [`RawSend`].
pub struct RawRecord {
    /// The event id (the message key when the row has no partition key).
    pub id: Uuid,
    /// The JSON payload.
    pub payload: String,
    /// The row's partition key.
    pub partition_key: Option<String>,
}

impl RawRecord {
    /// The message key a relay would use: the partition key, or the id.
    pub fn key(&self) -> String {
        self.partition_key.clone().unwrap_or_else(|| self.id.to_string())
    }
}

/// What the raw loop does between claim and settle when it has a broker: send every record of
/// the batch and return once the broker acknowledged all of them.
#[async_trait]
pub trait RawSend: Send + Sync {
    /// Sends `records`; an error ends the drain.
    async fn send(&self, records: &[RawRecord]) -> BenchResult<()>;
}

/// Totals of one raw worker.
#[derive(Default)]
pub struct RawTotals {
    /// Events settled.
    pub events: u64,
    /// Batches settled.
    pub batches: u64,
    /// Time inside claims (with decoding).
    pub claim: Duration,
    /// Time inside sends (zero without a [`RawSend`]).
    pub send: Duration,
    /// Time inside settles.
    pub settle: Duration,
}

/// Runs `workers` raw claim + settle loops over the backlog until it is empty (each sending its
/// batch through `send` between claim and settle, when given); returns their summed totals and the
/// wall time.
pub async fn raw_loop(
    bench: &Bench,
    sql: RawSql,
    workers: usize,
    batch_size: u32,
    send: Option<Arc<dyn RawSend>>,
) -> BenchResult<(RawTotals, Duration)> {
    let (claim, settle) = match sql {
        RawSql::HandWritten => (bench.raw_claim.clone(), bench.raw_settle.clone()),
        RawSql::Engine => (bench.sql(ENGINE_CLAIM), bench.sql(ENGINE_SETTLE)),
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let worker = RawWorker {
            pool: bench.pool.clone(),
            sql,
            claim: claim.clone(),
            settle: settle.clone(),
            send: send.clone(),
        };
        tasks.push(tokio::spawn(worker.run(batch_size)));
    }
    let mut totals = RawTotals::default();
    for task in tasks {
        let worker = task.await??;
        totals.events += worker.events;
        totals.batches += worker.batches;
        totals.claim += worker.claim;
        totals.send += worker.send;
        totals.settle += worker.settle;
    }
    Ok((totals, started.elapsed()))
}

/// One raw claim + settle loop.
struct RawWorker {
    pool: PgPool,
    sql: RawSql,
    claim: String,
    settle: String,
    send: Option<Arc<dyn RawSend>>,
}

impl RawWorker {
    /// Claims and settles until the backlog is empty. The claimed columns are decoded as a relay
    /// would decode them before sending (the engine's statement returns `headers` as JSONB, which
    /// is left undecoded).
    async fn run(self, batch_size: u32) -> BenchResult<RawTotals> {
        let mut totals = RawTotals::default();
        loop {
            let token = Uuid::now_v7();
            let started = Instant::now();
            let rows = sqlx::query(AssertSqlSafe(self.claim.clone()))
                .bind(EVENT_TYPE)
                .bind(i64::from(batch_size))
                .bind(token)
                .fetch_all(&self.pool)
                .await?;
            let mut records = Vec::with_capacity(rows.len());
            for row in &rows {
                let _payload_type: String = row.try_get("payload_type")?;
                if self.sql == RawSql::HandWritten {
                    let _headers: String = row.try_get("headers")?;
                }
                let _created: chrono::DateTime<chrono::Utc> = row.try_get("created_at")?;
                records.push(RawRecord {
                    id: row.try_get("id")?,
                    payload: row.try_get("payload")?,
                    partition_key: row.try_get("partition_key")?,
                });
            }
            totals.claim += started.elapsed();
            if records.is_empty() {
                return Ok(totals);
            }
            if let Some(send) = &self.send {
                let started = Instant::now();
                send.send(&records).await?;
                totals.send += started.elapsed();
            }
            let ids: Vec<Uuid> = records.iter().map(|record| record.id).collect();
            let started = Instant::now();
            let query = sqlx::query(AssertSqlSafe(self.settle.clone()));
            let query = match self.sql {
                RawSql::HandWritten => query.bind(&ids).bind(token),
                RawSql::Engine => query
                    .bind(token)
                    .bind(&ids)
                    .bind(vec!["PROCESSED"; ids.len()])
                    .bind(vec![0i64; ids.len()])
                    .bind(vec![None::<String>; ids.len()]),
            };
            let settled = query.execute(&self.pool).await?.rows_affected();
            totals.settle += started.elapsed();
            if settled != ids.len() as u64 {
                return Err(format!("raw settle changed {settled} of {} rows", ids.len()).into());
            }
            totals.events += settled;
            totals.batches += 1;
        }
    }
}

pub use oncebox_testkit::engine_suite::fast_polling;
