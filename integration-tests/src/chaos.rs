//! What the chaos ledger's processes share: the file the `chaos_relay` and `chaos_consumer`
//! binaries start from, the effect the consumer applies (recording every delivery first), and the
//! stats file a relay keeps up to date so that its counters outlive a SIGKILL.
//!
//! The file holds the library's own `oncebox:` block, validated by oncebox as any service's
//! configuration would be, and a `chaos:` block naming what the run's processes meet on:
//!
//! ```yaml
//! oncebox:
//!   tables: { prefix: c_0123456789ab_ }
//!   outbox: { events: { order-placed: { topic: oncebox_chaos_0123456789ab } } }
//!   inbox: {}
//! chaos:
//!   event-type: order-placed
//!   queue: oncebox_chaos_effects_0123456789ab
//!   consumer: effects
//!   effects-table: c_0123456789ab_effects
//!   deliveries-table: c_0123456789ab_deliveries
//!   stats-dir: /tmp/oncebox_chaos_0123456789ab
//!   exit-on-stdin-eof: true
//! ```
//!
//! Server addresses come only from `ONCEBOX_PG_URL` and `ONCEBOX_AMQP_URL`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncebox::postgres::PgDialect;
use oncebox::{Config, Consumed, Dialect, Error, ErrorKind, Inbox, Result, StatsSnapshot};
use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use crate::plumbing;

/// The variable that makes `chaos_consumer` apply effects without the inbox (`1`), so that the
/// ledger can be shown to catch double effects.
pub const BROKEN_VARIABLE: &str = "ONCEBOX_CHAOS_BROKEN";

/// The `chaos:` block of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChaosSettings {
    /// The one event type of the run (configured under `oncebox.outbox.events`).
    pub event_type: String,
    /// The RabbitMQ queue the consumers share, bound to the event type's exchange.
    pub queue: String,
    /// The inbox consumer name.
    pub consumer: String,
    /// The table of effects: one row per applied event.
    pub effects_table: String,
    /// The table of deliveries: one row per delivery the consumers saw, written before the effect.
    pub deliveries_table: String,
    /// Where relays keep their stats files.
    pub stats_dir: PathBuf,
    /// Exit (as on SIGTERM) when standard input reaches its end: the harness holds the other end
    /// of a pipe, so its processes go away with it even when it is itself SIGKILLed.
    #[serde(default)]
    pub exit_on_stdin_eof: bool,
}

/// The whole file: the library's configuration and the chaos block.
#[derive(Debug, Clone)]
pub struct ChaosFile {
    /// The validated `oncebox:` block.
    pub oncebox: Config,
    /// The `chaos:` block.
    pub chaos: ChaosSettings,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChaosFile {
    oncebox: serde_norway::Value,
    chaos: ChaosSettings,
}

#[derive(Serialize)]
struct OnceboxBlock<'a> {
    oncebox: &'a serde_norway::Value,
}

impl ChaosFile {
    /// Reads and validates the file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| plumbing(&format!("reading {}", path.display()), error))?;
        Self::parse(&text).map_err(|error| error.context(path.display()))
    }

    /// Parses and validates the file's text.
    pub fn parse(text: &str) -> Result<Self> {
        let raw: RawChaosFile = serde_norway::from_str(text)
            .map_err(|error| Error::new(ErrorKind::Config, format!("chaos file: {error}")))?;
        let block = serde_norway::to_string(&OnceboxBlock { oncebox: &raw.oncebox })
            .map_err(|error| plumbing("re-reading the oncebox block", error))?;
        let oncebox = Config::from_yaml_str(&block)?;
        oncebox.event(&raw.chaos.event_type)?;
        Ok(Self { oncebox, chaos: raw.chaos })
    }

    /// The exchange the event type is relayed to.
    pub fn exchange(&self) -> Result<String> {
        Ok(self.oncebox.event(&self.chaos.event_type)?.topic.clone())
    }
}

/// The value of a required server variable.
pub fn required_variable(variable: &str) -> Result<String> {
    crate::store::server_url(variable)
        .ok_or_else(|| Error::new(ErrorKind::Config, format!("{variable} is not set")))
}

/// The inbox type of the PostgreSQL dialect.
pub type PgInbox = Inbox<Arc<<PgDialect as Dialect>::Writer>>;

fn database_error(context: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |error| Error::database(context, false, error)
}

/// Creates the deliveries table: every delivery a consumer saw, with the outcome once known.
pub async fn create_deliveries_table(pool: &sqlx::PgPool, table: &str) -> Result<()> {
    let statement = format!(
        "CREATE TABLE {table} (delivery_id BIGSERIAL PRIMARY KEY, event_id VARCHAR(36) NOT NULL, \
         pid BIGINT NOT NULL, outcome VARCHAR(16))"
    );
    sqlx::raw_sql(AssertSqlSafe(statement))
        .execute(pool)
        .await
        .map_err(database_error("creating the deliveries table"))?;
    Ok(())
}

/// Handles one delivery of event `id`: records the delivery (committed on its own, so a SIGKILL
/// right after loses nothing), applies the effect, then notes the outcome on the delivery row.
///
/// The effect goes through the inbox: `record_in`, the effect row, commit, `remember` — one
/// transaction, `Inbox::consume_in` spelled out (see `Store::apply` for why). With `broken`, the
/// effect row is written without any inbox check, so every redelivery applies it again.
pub async fn apply_event(
    pool: &sqlx::PgPool,
    inbox: &PgInbox,
    settings: &ChaosSettings,
    id: Uuid,
    broken: bool,
) -> Result<Consumed<()>> {
    let record = format!(
        "INSERT INTO {} (event_id, pid) VALUES ($1, $2) RETURNING delivery_id",
        settings.deliveries_table
    );
    let delivery: i64 = sqlx::query_scalar(AssertSqlSafe(record))
        .bind(id.to_string())
        .bind(i64::from(std::process::id()))
        .fetch_one(pool)
        .await
        .map_err(database_error("recording a delivery"))?;
    let effect = format!("INSERT INTO {} (event_id) VALUES ($1)", settings.effects_table);
    let outcome = if broken {
        sqlx::query(AssertSqlSafe(effect))
            .bind(id.to_string())
            .execute(pool)
            .await
            .map_err(database_error("inserting the effect"))?;
        Consumed::Applied(())
    } else {
        let mut tx = pool.begin().await.map_err(database_error("begin"))?;
        if inbox.record_in(&mut tx, id).await? {
            sqlx::query(AssertSqlSafe(effect))
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(database_error("inserting the effect"))?;
            tx.commit().await.map_err(database_error("commit"))?;
            inbox.remember(id).await;
            Consumed::Applied(())
        } else {
            tx.rollback().await.map_err(database_error("rollback"))?;
            Consumed::Duplicate
        }
    };
    let label = match outcome {
        Consumed::Applied(()) => "applied",
        Consumed::Duplicate => "duplicate",
    };
    let note = format!("UPDATE {} SET outcome = $1 WHERE delivery_id = $2", settings.deliveries_table);
    sqlx::query(AssertSqlSafe(note))
        .bind(label)
        .bind(delivery)
        .execute(pool)
        .await
        .map_err(database_error("noting a delivery's outcome"))?;
    Ok(outcome)
}

/// The counters of one relay process, as its stats file last had them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Rows claimed.
    pub claimed: u64,
    /// Events the broker acknowledged.
    pub delivered: u64,
    /// Settles refused by the claim-token fence.
    pub refused_settles: u64,
    /// Rows returned to PENDING by stuck recovery.
    pub recovered: u64,
}

impl From<StatsSnapshot> for RelayStats {
    fn from(stats: StatsSnapshot) -> Self {
        Self {
            claimed: stats.claimed,
            delivered: stats.delivered,
            refused_settles: stats.refused_settles,
            recovered: stats.recovered,
        }
    }
}

impl RelayStats {
    /// The stats file of the relay process `pid` in `dir`.
    pub fn path(dir: &Path, pid: u32) -> PathBuf {
        dir.join(format!("relay-{pid}.stats"))
    }

    /// Replaces the file at `path` (written aside and renamed, so a reader never sees half).
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "claimed {}\ndelivered {}\nrefused_settles {}\nrecovered {}\n",
            self.claimed, self.delivered, self.refused_settles, self.recovered
        );
        let aside = path.with_extension("stats.new");
        std::fs::write(&aside, text).map_err(|error| plumbing("writing the stats file", error))?;
        std::fs::rename(&aside, path).map_err(|error| plumbing("renaming the stats file", error))
    }

    /// Every relay's stats in `dir`, by file name.
    pub fn read_all(dir: &Path) -> Result<Vec<(String, Self)>> {
        let mut all = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|error| plumbing("listing the stats files", error))?;
        for entry in entries {
            let entry = entry.map_err(|error| plumbing("listing the stats files", error))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".stats") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|error| plumbing("reading a stats file", error))?;
            let mut stats = Self::default();
            for line in text.lines() {
                let Some((key, value)) = line.split_once(' ') else { continue };
                let value: u64 = value.parse().map_err(|error| plumbing(&format!("{name}: {key}"), error))?;
                match key {
                    "claimed" => stats.claimed = value,
                    "delivered" => stats.delivered = value,
                    "refused_settles" => stats.refused_settles = value,
                    "recovered" => stats.recovered = value,
                    _ => {}
                }
            }
            all.push((name, stats));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }
}

/// Completes on SIGTERM or Ctrl-C, and with `stdin_eof` also when standard input ends.
pub async fn terminated(stdin_eof: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let (ended, input_ended) = tokio::sync::oneshot::channel::<()>();
    if stdin_eof {
        // A plain thread: the read blocks until the writer (the harness) closes the pipe or dies.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            let _ = ended.send(());
        });
    } else {
        // The receiver then fails at once, which disables its branch below.
        drop(ended);
    }
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
        Ok(()) = input_ended => {}
    }
}

/// Logs to stderr (`RUST_LOG`, `warn` when unset).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// The `--config <path>` argument of a chaos binary.
pub fn config_argument() -> Result<PathBuf> {
    let mut arguments = std::env::args_os().skip(1);
    while let Some(argument) = arguments.next() {
        if argument == "--config" {
            return arguments
                .next()
                .map(PathBuf::from)
                .ok_or_else(|| Error::new(ErrorKind::Config, "--config needs a path"));
        }
        if let Some(path) = argument.to_str().and_then(|text| text.strip_prefix("--config=")) {
            return Ok(PathBuf::from(path));
        }
    }
    Err(Error::new(ErrorKind::Config, "usage: --config <file.yaml>"))
}
