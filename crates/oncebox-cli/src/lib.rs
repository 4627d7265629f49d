//! `oncebox`, the command line for operators and deploy scripts, on PostgreSQL, MySQL/MariaDB
//! and SQLite.
//!
//! ```sh
//! # create or upgrade the tables (all of them, or those a config file's sections need)
//! oncebox migrate --database-url postgres://app@db/app --config config/oncebox.yaml
//! # per event type: pending, in process, failed, the oldest pending age; DLQ counts
//! oncebox status --database-url "$DATABASE_URL"
//! # the dead letter queue, with the REST API's rules
//! oncebox dlq list --status MOVED --event-type order-created
//! oncebox dlq show 01a2482a-62e6-7251-a460-b28c9ce48829
//! oncebox dlq retry --event-type order-created
//! # an event written more than oncebox.outbox.dlq.re-drive-max-age ago (default 24h) is re-driven
//! # only when asked for explicitly: consumers may refuse it as too old, or apply it again
//! oncebox dlq retry 01a2482a-62e6-7251-a460-b28c9ce48829 --allow-older
//! oncebox dlq delete 01a2482a-62e6-7251-a460-b28c9ce48829 --yes
//! # reject a bad config before a rollout: exit status 2 and the key that is wrong
//! oncebox check-config config/oncebox.yaml
//! ```
//!
//! Every database command takes `--database-url` (or `ONCEBOX_DATABASE_URL`), and the table
//! names from `--table-prefix` or from `oncebox.tables` of `--config`. Exit status: 0 done, 1 the
//! work failed (the database, an absent or busy event), 2 the command or the config was wrong.

mod check;
pub mod database;
mod dlq;
mod migrate;
mod status;
mod text;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use oncebox_core::{Config, DlqStatus, Error, ErrorKind, TableNames};
use uuid::Uuid;

use database::Database;

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "oncebox", version, about = "Operate oncebox's outbox, DLQ and config", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the tables that are missing and upgrade old ones, printing what was done.
    Migrate {
        #[command(flatten)]
        target: Target,
    },
    /// Per event type: pending, in process, processed and failed events, how long the oldest
    /// pending one has waited; then the DLQ's events per type and status.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// List, show, retry, resolve or delete dead letters.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Load and validate a YAML or TOML config file exactly as a service would, and print the
    /// settings each event type resolves to.
    CheckConfig {
        /// The file (`.yaml`, `.yml` or `.toml`).
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// A page of dead letters, oldest arrival first.
    List {
        #[command(flatten)]
        target: Target,
        /// Only events in this status (MOVED, TO_RETRY, IN_PROCESS, RESOLVED).
        #[arg(long)]
        status: Option<DlqStatus>,
        /// Only events of this type.
        #[arg(long)]
        event_type: Option<String>,
        /// Events to skip.
        #[arg(long)]
        offset: Option<u64>,
        /// Events per page (1 to 500, default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One dead letter with its whole payload.
    Show {
        #[command(flatten)]
        target: Target,
        /// The event id.
        id: Uuid,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send events back to the outbox: the service's transfer job moves them as PENDING.
    ///
    /// Events written longer ago than the re-drive max age are re-driven only with
    /// `--allow-older`: a consumer whose inbox no longer keeps their ids refuses them as too old,
    /// and one without inbox retention may apply them a second time.
    Retry {
        #[command(flatten)]
        selected: Selected,
        /// Re-drive events written longer ago than the re-drive max age too.
        #[arg(long)]
        allow_older: bool,
        /// The re-drive max age (e.g. `12h`, `2d`); wins over `oncebox.outbox.dlq.re-drive-max-age`
        /// of `--config`. Default: the config file's, else 24h.
        #[arg(long, value_parser = positive_duration)]
        re_drive_max_age: Option<Duration>,
    },
    /// Mark events handled: the DLQ clean-up deletes them after its TTL.
    Resolve(Selected),
    /// Delete events now (asks for `--yes`).
    Delete {
        #[command(flatten)]
        selected: Selected,
        /// Confirm the delete.
        #[arg(long)]
        yes: bool,
    },
}

/// The events a change is about: ids or an event type, exactly one of the two.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("events").required(true).multiple(false).args(["ids", "event_type"])))]
struct Selected {
    #[command(flatten)]
    target: Target,
    /// These events (at most 1,000).
    ids: Vec<Uuid>,
    /// Every event of this type.
    #[arg(long)]
    event_type: Option<String>,
}

/// A duration such as `12h` or `2d`, greater than 0.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(duration) if duration.is_zero() => Err("must be greater than 0".to_owned()),
        Ok(duration) if duration > oncebox_core::config::MAX_SETTING_DURATION => {
            Err("is longer than the 100 years any duration may be".to_owned())
        }
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!("'{text}' is not a duration such as 12h or 2d: {error}")),
    }
}

/// The database and tables a command works on.
#[derive(Debug, Args)]
struct Target {
    /// `postgres://…`, `mysql://…` (or `mariadb://…`) or `sqlite:…`.
    #[arg(long, env = "ONCEBOX_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// A config file: its `oncebox.tables` names the tables, `migrate` creates only the tables
    /// its sections use, and `dlq retry` reads its `oncebox.outbox.dlq.re-drive-max-age`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A prefix before every table name (default none: `outbox_events`, …); wins over the config
    /// file's `tables.prefix`.
    #[arg(long)]
    table_prefix: Option<String>,
}

impl Target {
    /// The config file, when given, and the table names to use.
    fn resolve(&self) -> Result<(Option<Config>, TableNames), Failure> {
        let config = self.config.as_ref().map(Config::from_file).transpose()?;
        let tables = match (&self.table_prefix, &config) {
            (Some(prefix), _) => TableNames::with_prefix(prefix)?,
            (None, Some(config)) => config.tables.names.clone(),
            (None, None) => TableNames::default(),
        };
        Ok((config, tables))
    }

    async fn connect(&self, tables: &TableNames) -> Result<Database, Failure> {
        Ok(Database::connect(&self.database_url, tables).await?)
    }
}

/// Why a command did not finish: what to print, and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// 1: the work failed; 2: the command or the config was wrong.
    pub status: u8,
    /// What went wrong, for standard error.
    pub message: String,
}

impl Failure {
    /// The work failed (a database error, an absent or busy event).
    fn work(message: impl Into<String>) -> Self {
        Self { status: 1, message: message.into() }
    }

    /// The command was wrong.
    fn usage(message: impl Into<String>) -> Self {
        Self { status: 2, message: message.into() }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match error.kind() {
            ErrorKind::InvalidInput | ErrorKind::Config => Self::usage(error.to_string()),
            _ => Self::work(error.to_string()),
        }
    }
}

impl Cli {
    /// Runs the command, printing its result on standard output.
    pub async fn run(self) -> Result<(), Failure> {
        match self.command {
            Command::Migrate { target } => migrate::run(&target).await,
            Command::Status { target, json } => status::run(&target, json).await,
            Command::Dlq { command } => dlq::run(command).await,
            Command::CheckConfig { file } => check::run(&file),
        }
    }
}

/// Runs the command line of this process and tells the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli.run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}
