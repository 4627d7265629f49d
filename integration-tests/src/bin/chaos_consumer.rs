//! A consumer process of the chaos ledger: the listener of the broker its file names, applying
//! each event's effect through the inbox into the effects table and recording every delivery
//! first, as the file's flavour says (`record_in`, `on_once`, or a durable inbox that the listener
//! stores into and whose processor applies the effect). Started from `--config <file.yaml>` and the server variables; runs until SIGTERM,
//! Ctrl-C, SIGKILL or (with `exit-on-stdin-eof`) the end of its standard input. With
//! `ONCEBOX_CHAOS_BROKEN=1` it applies effects without the inbox, so the ledger must report double
//! effects.

use std::process::ExitCode;

use oncebox_integration_tests::chaos::{
    BROKEN_VARIABLE, ChaosFile, config_argument, init_logging, run_consumer,
};

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let broken = std::env::var(BROKEN_VARIABLE).is_ok_and(|value| value == "1");
    if broken {
        eprintln!("chaos_consumer: {BROKEN_VARIABLE}=1, effects are applied WITHOUT the inbox");
    }
    let ran = match config_argument().and_then(|path| ChaosFile::read(&path)) {
        Ok(file) => run_consumer(&file, broken).await,
        Err(error) => Err(error),
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaos_consumer: {error}");
            ExitCode::FAILURE
        }
    }
}
