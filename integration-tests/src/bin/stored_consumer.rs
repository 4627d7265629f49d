//! A durable inbox consumer process for the restart test: a processor of consumer
//! [`STORED_CONSUMER`] on the PostgreSQL at `ONCEBOX_PG_URL`, over the tables of the prefix given as
//! its first argument, applying `order-placed` events with a transactional handler that writes a
//! row of `<prefix>effects` and then fails while the message has had fewer failed runs than the
//! second argument says. Retries wait the third argument in milliseconds. Runs until killed or until
//! its standard input ends.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use oncebox::config::Backoff;
use oncebox::postgres::PgDialect;
use oncebox::stored::{StoredEvent, StoredInbox, StoredInboxSettings};
use oncebox::{Dialect, Error, ErrorKind, Result, TableNames};
use oncebox_integration_tests::chaos::terminated;
use oncebox_integration_tests::{EVENT_TYPE, Order, STORED_CONSUMER};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stored_consumer: {error}");
            ExitCode::FAILURE
        }
    }
}

fn argument(position: usize, name: &str) -> Result<String> {
    std::env::args()
        .nth(position)
        .ok_or_else(|| Error::invalid_input(format!("argument {position} ({name}) is missing")))
}

fn number(position: usize, name: &str) -> Result<u64> {
    let text = argument(position, name)?;
    text.parse()
        .map_err(|_| Error::invalid_input(format!("argument {position} ({name}) '{text}' is not a number")))
}

async fn run() -> Result<()> {
    let prefix = argument(1, "table prefix")?;
    let fail_runs = u32::try_from(number(2, "failed runs")?)
        .map_err(|_| Error::invalid_input("argument 2 (failed runs) is too large"))?;
    let backoff = Duration::from_millis(number(3, "retry wait in milliseconds")?);
    let url = std::env::var("ONCEBOX_PG_URL").map_err(|_| Error::config("ONCEBOX_PG_URL", "is not set"))?;
    let tables = TableNames::with_prefix(&prefix)?;
    let dialect = PgDialect::connect(&url).await?.with_tables(&tables);
    let effects: Arc<str> = format!("{prefix}effects").into();
    let inbox =
        StoredInbox::new(STORED_CONSUMER, dialect.stored_inbox_dao()).with_settings(StoredInboxSettings {
            poll_interval: Duration::from_millis(50),
            backoff: Backoff {
                enabled: true,
                delay: backoff,
                multiplier: 1.0,
                max_delay: backoff,
                jitter: 0.0,
            },
            ..StoredInboxSettings::default()
        })?;
    let processing = inbox
        .processor()
        .on_in(EVENT_TYPE, dialect.clone(), move |tx, event: StoredEvent<Order>| {
            let effects = effects.clone();
            Box::pin(async move {
                let insert =
                    format!("INSERT INTO {effects} (event_id, pid, failed_before) VALUES ($1, $2, $3)");
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(event.id)
                    .bind(i64::from(std::process::id()))
                    .bind(i64::from(event.source.attempts))
                    .execute(&mut **tx)
                    .await?;
                if event.source.attempts < fail_runs {
                    let text = format!(
                        "order {} fails on purpose (run {})",
                        event.payload.order,
                        event.source.attempts + 1
                    );
                    return Err(Error::new(ErrorKind::Other, text).into());
                }
                Ok(())
            })
        })
        .start()?;
    // Until the test closes standard input (or kills the process).
    terminated(true).await;
    processing.shutdown(Duration::from_secs(5)).await;
    Ok(())
}
