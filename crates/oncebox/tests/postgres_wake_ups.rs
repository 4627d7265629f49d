//! `oncebox.outbox.wake-up` is one switch for both sides on PostgreSQL: off, the publisher sends
//! no NOTIFY; on, a commit notifies the channel. Needs `ONCEBOX_PG_URL` (a missing server fails
//! under `CI=true`).
//!
//! Absence is proven by order, not by waiting: after the publishing transaction commits, the test
//! sends a sentinel notification of its own. PostgreSQL delivers notifications in commit order, so
//! the first one a listener receives is the publish's when it sent one, and the sentinel when not.

use std::process::ExitCode;
use std::sync::Arc;

use oncebox::postgres::PgDialect;
use oncebox::{Config, Oncebox};
use oncebox_testkit::runner::{Case, Suite, TestResult, fail};
use oncebox_testkit::{MemoryBroker, random_prefix};
use sqlx::postgres::PgListener;

const SENTINEL: &str = "sentinel";

/// The first notification after one committed publish, with `wake-up` set to `mode`.
async fn first_notification_after_a_publish(
    url: &str,
    mode: &str,
) -> Result<String, oncebox_testkit::runner::Failed> {
    let config = Config::from_yaml_str(&format!(
        r#"
oncebox:
  tables: {{ prefix: {prefix} }}
  outbox:
    wake-up: {mode}
    events:
      order-created: {{ topic: orders }}
"#,
        prefix = random_prefix()
    ))
    .map_err(fail)?;
    let dialect = PgDialect::connect(url).await.map_err(fail)?;
    let pool = dialect.pool().clone();
    let outbox =
        Oncebox::builder(config).dialect(dialect).sender(MemoryBroker::new()).start().await.map_err(fail)?;
    let channel = outbox.dialect().channel().to_owned();
    let mut listener = PgListener::connect_with(&pool).await.map_err(fail)?;
    listener.listen(&channel).await.map_err(fail)?;

    let mut tx = pool.begin().await.map_err(fail)?;
    outbox
        .publisher()
        .publish(&mut tx, "order-created", &serde_json::json!({"id": 1}))
        .await
        .map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(&channel)
        .bind(SENTINEL)
        .execute(&pool)
        .await
        .map_err(fail)?;

    let first = listener.recv().await.map_err(fail)?.payload().to_owned();
    outbox.shutdown(std::time::Duration::from_secs(10)).await.map_err(fail)?;
    Ok(first)
}

async fn wake_up_off_sends_no_notify(url: Arc<String>) -> TestResult {
    let first = first_notification_after_a_publish(&url, "off").await?;
    if first == SENTINEL { Ok(()) } else { Err(fail(format!("wake-up: off still notified {first:?}"))) }
}

async fn wake_up_on_notifies_the_event_type(url: Arc<String>) -> TestResult {
    let first = first_notification_after_a_publish(&url, "listen-notify").await?;
    if first == "order-created" {
        Ok(())
    } else {
        Err(fail(format!("wake-up: listen-notify did not notify first, got {first:?}")))
    }
}

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_PG_URL") else {
        return oncebox_testkit::runner::server_missing("postgres_wake_ups", "ONCEBOX_PG_URL");
    };
    Suite::new()
        .add(
            "postgres",
            Arc::new(url),
            vec![
                Case {
                    name: "wake_up_off_sends_no_notify",
                    run: |url| Box::pin(wake_up_off_sends_no_notify(url)),
                },
                Case {
                    name: "wake_up_on_notifies_the_event_type",
                    run: |url| Box::pin(wake_up_on_notifies_the_event_type(url)),
                },
            ],
        )
        .run()
}
