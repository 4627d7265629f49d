//! A relay process of the chaos ledger: an `Oncebox` engine (PostgreSQL dialect, `RabbitSender`)
//! started from `--config <file.yaml>` and the variables `ONCEBOX_PG_URL` and `ONCEBOX_AMQP_URL`,
//! running until SIGTERM, Ctrl-C, SIGKILL or (with `exit-on-stdin-eof`) the end of its standard
//! input. Every 200 ms it replaces its stats file
//! (`<stats-dir>/relay-<pid>.stats`), so its counters survive a SIGKILL.

use std::process::ExitCode;
use std::time::Duration;

use oncebox::postgres::PgDialect;
use oncebox::rabbit::{RabbitSender, RabbitSenderConfig};
use oncebox::{Error, ErrorKind, Lifecycle, Oncebox, Result};
use oncebox_integration_tests::chaos::{
    ChaosFile, RelayStats, config_argument, init_logging, required_variable, terminated,
};

/// How often the stats file is replaced.
const STATS_EVERY: Duration = Duration::from_millis(200);
/// The graceful shutdown deadline after SIGTERM.
const SHUTDOWN: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaos_relay: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let file = ChaosFile::read(&config_argument()?)?;
    let database = required_variable("ONCEBOX_PG_URL")?;
    let broker = required_variable("ONCEBOX_AMQP_URL")?;
    let emergency_timeout = file
        .oncebox
        .outbox
        .as_ref()
        .map(|outbox| outbox.emergency_timeout)
        .ok_or_else(|| Error::config("oncebox.outbox", "a relay needs the outbox section"))?;
    let pid = std::process::id();
    let sender = RabbitSender::new(
        RabbitSenderConfig::new(&broker)
            .with_emergency_timeout(emergency_timeout)
            .with_connection_name(format!("chaos_relay-{pid}")),
    )?;
    let outbox = Oncebox::builder(file.oncebox.clone())
        .dialect(PgDialect::connect(&database).await?)
        .sender(sender)
        .start()
        .await?;
    let stats_path = RelayStats::path(&file.chaos.stats_dir, pid);
    RelayStats::from(outbox.stats()).write(&stats_path)?;

    let mut stop = std::pin::pin!(terminated(file.chaos.exit_on_stdin_eof));
    let failure = loop {
        tokio::select! {
            () = &mut stop => break None,
            () = tokio::time::sleep(STATS_EVERY) => {}
        }
        RelayStats::from(outbox.stats()).write(&stats_path)?;
        if let Lifecycle::Failed(reason) = outbox.state() {
            break Some(reason);
        }
    };
    let shutdown = outbox.shutdown(SHUTDOWN).await;
    RelayStats::from(outbox.stats()).write(&stats_path)?;
    if let Some(reason) = failure {
        return Err(Error::new(ErrorKind::Other, format!("the engine failed: {reason}")));
    }
    shutdown
}
