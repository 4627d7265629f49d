//! A relay process of the chaos ledger: an `Oncebox` engine on the dialect and broker its file
//! names, started from `--config <file.yaml>` and the server variables, running until SIGTERM,
//! Ctrl-C, SIGKILL or (with `exit-on-stdin-eof`) the end of its standard input. Every 200 ms it
//! replaces its stats file (`<stats-dir>/relay-<pid>.stats`), so its counters survive a SIGKILL.

use std::process::ExitCode;

use oncebox_integration_tests::chaos::{ChaosFile, config_argument, init_logging, run_relay};

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let ran = match config_argument().and_then(|path| ChaosFile::read(&path)) {
        Ok(file) => run_relay(&file).await,
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
