//! A relay process of the chaos ledger: an `Oncebox` engine on the dialect and broker its file
//! names, started from `--config <file.yaml>` and the server variables, running until SIGTERM,
//! Ctrl-C, SIGKILL or (with `exit-on-stdin-eof`) the end of its standard input. Every 200 ms it
//! replaces its stats file (`<stats-dir>/relay-<pid>.stats`), so its counters survive a SIGKILL.
//! With `ONCEBOX_CHAOS_DROP_SENDS=1` it marks one event in eight PROCESSED without sending it, so
//! the ledger must report lost events.

use std::process::ExitCode;

use oncebox_integration_tests::chaos::{
    ChaosFile, DROP_SENDS_VARIABLE, config_argument, init_logging, run_relay,
};

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let drop_sends = std::env::var(DROP_SENDS_VARIABLE).is_ok_and(|value| value == "1");
    if drop_sends {
        eprintln!(
            "chaos_relay: {DROP_SENDS_VARIABLE}=1, one event in eight is marked PROCESSED WITHOUT being sent"
        );
    }
    let ran = match config_argument().and_then(|path| ChaosFile::read(&path)) {
        Ok(file) => run_relay(&file, drop_sends).await,
        Err(error) => Err(error),
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaos_relay: {error}");
            ExitCode::FAILURE
        }
    }
}
