//! A consumer process of the chaos ledger: the RabbitMQ listener on the run's queue, applying each
//! event's effect through the inbox into the effects table and recording every delivery first.
//! Started from `--config <file.yaml>` and the variables `ONCEBOX_PG_URL` and `ONCEBOX_AMQP_URL`;
//! runs until SIGTERM, Ctrl-C, SIGKILL or (with `exit-on-stdin-eof`) the end of its standard
//! input. With `ONCEBOX_CHAOS_BROKEN=1` it applies effects without the inbox, so the ledger must
//! report double effects.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use oncebox::Oncebox;
use oncebox::Result;
use oncebox::postgres::PgDialect;
use oncebox::rabbit::{RabbitEvent, RabbitListener, RabbitListenerConfig, RabbitTopology};
use oncebox_integration_tests::Order;
use oncebox_integration_tests::chaos::{
    BROKEN_VARIABLE, ChaosFile, apply_event, config_argument, init_logging, required_variable, terminated,
};

/// The listener retries a failed handler after this, doubling up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(20);
/// The longest wait before a failed handler is retried.
const RETRY_MAX: Duration = Duration::from_millis(500);
/// The graceful shutdown deadline after SIGTERM.
const SHUTDOWN: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaos_consumer: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let file = ChaosFile::read(&config_argument()?)?;
    let database = required_variable("ONCEBOX_PG_URL")?;
    let broker = required_variable("ONCEBOX_AMQP_URL")?;
    let broken = std::env::var(BROKEN_VARIABLE).is_ok_and(|value| value == "1");
    if broken {
        eprintln!("chaos_consumer: {BROKEN_VARIABLE}=1, effects are applied WITHOUT the inbox");
    }
    let exchange = file.exchange()?;
    // A consumer-only service: no sender, no pollers; the inbox and its clean-up.
    let mut config = file.oncebox.clone();
    config.outbox = None;
    let oncebox = Oncebox::builder(config).dialect(PgDialect::connect(&database).await?).start().await?;
    let inbox = oncebox.inbox(file.chaos.consumer.clone());
    let pool = oncebox.dialect().pool().clone();
    let settings = Arc::new(file.chaos.clone());

    let listener_config = RabbitListenerConfig::new(&broker, &settings.queue)
        .with_declare(RabbitTopology::new(exchange))
        .with_retry_backoff(RETRY_MIN, RETRY_MAX)
        .with_connection_name(format!("chaos_consumer-{}", std::process::id()));
    let listener = RabbitListener::builder(listener_config)
        .on(settings.event_type.clone(), move |event: RabbitEvent<Order>| {
            let (pool, inbox, settings) = (pool.clone(), inbox.clone(), settings.clone());
            async move { apply_event(&pool, &inbox, &settings, event.id, broken).await }
        })
        .build()?;
    let listened = listener.run(terminated(file.chaos.exit_on_stdin_eof)).await;
    let shutdown = oncebox.shutdown(SHUTDOWN).await;
    listened?;
    shutdown
}
