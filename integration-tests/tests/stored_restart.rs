//! The durable inbox's once-only effect on the real PostgreSQL: across a SIGKILL, and against a
//! run that outlasts its lease (the second test).
//!
//! Across a SIGKILL: a message whose handler fails twice
//! waits for its third run in its row; the consumer process is killed while it waits; a new process
//! continues at the stored attempt and time and applies the effect once.
//!
//! The accounting: the first process's two failed runs left no effect row (each rolled back with
//! its failed settle) and two attempts in the message's row; the kill changed nothing in the row;
//! the second process ran the message once, not before the stored `available_at`, with the two
//! failed runs it found in the row, and committed exactly one effect row with PROCESSED.

use std::process::Stdio;
use std::time::Duration;

use oncebox::postgres::PgDialect;
use oncebox::stored::{InboxMessage, InboxStatus, NewInboxMessage};
use oncebox::{Dialect, Headers, SchemaPlan, StoredInboxDao, TableNames};
use oncebox_integration_tests::{EVENT_TYPE, Order, PgStore, STORED_CONSUMER, Store};
use oncebox_testkit::random_prefix;
use oncebox_testkit::runner::{Failed, fail, test_server_missing};
use sqlx::AssertSqlSafe;
use tokio::process::{Child, Command};
use uuid::Uuid;

/// The bound on waiting for a process to reach a state.
const WAIT: Duration = Duration::from_secs(60);
/// The wait before each retry: long enough for the kill to land while the row waits.
const RETRY_WAIT_MS: u64 = 3_000;

fn consumer(prefix: &str) -> Result<Child, Failed> {
    Command::new(env!("CARGO_BIN_EXE_stored_consumer"))
        .args([prefix, "2", &RETRY_WAIT_MS.to_string()])
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(fail)
}

async fn row(inbox: &dyn StoredInboxDao, id: Uuid) -> Result<InboxMessage, Failed> {
    inbox.get(STORED_CONSUMER, id).await.map_err(fail)?.ok_or_else(|| fail("the message row is gone"))
}

/// Polls the message's row until `done` says so.
async fn until(
    inbox: &dyn StoredInboxDao,
    id: Uuid,
    what: &str,
    done: impl Fn(&InboxMessage) -> bool,
) -> Result<InboxMessage, Failed> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let stored = row(inbox, id).await?;
        if done(&stored) {
            return Ok(stored);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(fail(format!("{what}: not reached; the row is {stored:?}")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn effects(dialect: &PgDialect, prefix: &str) -> Result<Vec<(Uuid, i64, i64)>, Failed> {
    let select = format!("SELECT event_id, pid, failed_before FROM {prefix}effects ORDER BY failed_before");
    sqlx::query_as(AssertSqlSafe(select)).fetch_all(dialect.pool()).await.map_err(fail)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_while_a_retry_waits_is_continued_at_the_stored_attempt_and_time()
-> Result<(), Failed> {
    let test = "stored_restart";
    let variable = PgStore::VARIABLE.unwrap_or_default();
    let Some(url) = std::env::var(variable).ok().filter(|url| !url.is_empty()) else {
        return test_server_missing(test, variable);
    };
    let prefix = random_prefix();
    let dialect = PgDialect::connect(&url)
        .await
        .map_err(fail)?
        .with_tables(&TableNames::with_prefix(&prefix).map_err(fail)?);
    dialect.create_schema(SchemaPlan { inbox: true, ..SchemaPlan::default() }).await.map_err(fail)?;
    let create = format!(
        "CREATE TABLE {prefix}effects (event_id UUID NOT NULL, pid BIGINT NOT NULL, failed_before BIGINT NOT NULL)"
    );
    sqlx::query(AssertSqlSafe(create)).execute(dialect.pool()).await.map_err(fail)?;
    let outcome = scenario(&dialect, &prefix).await;
    for table in [
        format!("{prefix}effects"),
        dialect.tables().inbox().to_owned(),
        dialect.tables().consumed().to_owned(),
    ] {
        let drop = format!("DROP TABLE IF EXISTS {table}");
        sqlx::query(AssertSqlSafe(drop)).execute(dialect.pool()).await.map_err(fail)?;
    }
    outcome
}

async fn scenario(dialect: &PgDialect, prefix: &str) -> Result<(), Failed> {
    let inbox = dialect.stored_inbox_dao();
    let message = NewInboxMessage {
        consumer: STORED_CONSUMER.into(),
        id: Uuid::now_v7(),
        event_type: EVENT_TYPE.into(),
        payload_type: Some("Order".into()),
        payload: serde_json::to_vec(&Order { order: 7, total_cents: 1_250 }).map_err(fail)?,
        headers: Headers::new(),
        source: "queue 'orders'".into(),
        correlation_id: None,
        created_at: None,
    };
    assert!(inbox.store(&message).await.map_err(fail)?);

    let mut first = consumer(prefix)?;
    let waiting = until(&*inbox, message.id, "two failed runs", |stored| {
        stored.attempts == 2 && stored.status == InboxStatus::Received
    })
    .await?;
    first.start_kill().map_err(fail)?;
    first.wait().await.map_err(fail)?;
    let due = waiting.available_at.ok_or_else(|| fail("a waiting retry has its time"))?;
    let after_kill = row(&*inbox, message.id).await?;
    assert_eq!(
        (after_kill.status, after_kill.attempts, after_kill.available_at),
        (InboxStatus::Received, 2, Some(due)),
        "the kill changed nothing in the row"
    );
    assert!(effects(dialect, prefix).await?.is_empty(), "the failed runs' effect rows were rolled back");

    let mut second = consumer(prefix)?;
    let second_pid = second.id().map(i64::from);
    let done =
        until(&*inbox, message.id, "the third run", |stored| stored.status == InboxStatus::Processed).await;
    drop(second.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(10), second.wait()).await;
    let done = done?;
    assert_eq!(done.attempts, 2, "the applied run counts no failure");
    let processed_at = done.processed_at.ok_or_else(|| fail("PROCESSED has its time"))?;
    assert!(processed_at >= due, "run at {processed_at}, before its stored time {due}");
    let effects = effects(dialect, prefix).await?;
    assert_eq!(effects.len(), 1, "one effect: {effects:?}");
    assert_eq!(effects[0].0, message.id);
    assert_eq!(Some(effects[0].1), second_pid, "applied by the new process");
    assert_eq!(effects[0].2, 2, "which found the two failed runs in the row");
    Ok(())
}

/// A run that outlasts its claim's lease: the message is recovered and run again by the same
/// processor while the first run still holds its transaction open; the second run commits the
/// effect with PROCESSED, and the first, finishing late, meets the claim-token fence and rolls its
/// effect back. One effect, written by the second run; the lost run counted as an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_outlasts_its_lease_is_rolled_back_and_the_take_over_counts() -> Result<(), Failed> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use oncebox::stored::{StoredEvent, StoredInbox, StoredInboxSettings};

    let variable = PgStore::VARIABLE.unwrap_or_default();
    let Some(url) = std::env::var(variable).ok().filter(|url| !url.is_empty()) else {
        return test_server_missing("stored_take_over", variable);
    };
    let prefix = random_prefix();
    let dialect = PgDialect::connect(&url)
        .await
        .map_err(fail)?
        .with_tables(&TableNames::with_prefix(&prefix).map_err(fail)?);
    dialect.create_schema(SchemaPlan { inbox: true, ..SchemaPlan::default() }).await.map_err(fail)?;
    // No key on event_id: two committed runs would show as two rows.
    let create = format!(
        "CREATE TABLE {prefix}effects (event_id UUID NOT NULL, pid BIGINT NOT NULL, failed_before BIGINT NOT NULL)"
    );
    sqlx::query(AssertSqlSafe(create)).execute(dialect.pool()).await.map_err(fail)?;
    let inbox = StoredInbox::new(STORED_CONSUMER, dialect.stored_inbox_dao())
        .with_settings(StoredInboxSettings {
            lease: Duration::from_millis(300),
            poll_interval: Duration::from_millis(20),
            ..StoredInboxSettings::default()
        })
        .map_err(fail)?;
    let message = NewInboxMessage {
        consumer: STORED_CONSUMER.into(),
        id: Uuid::now_v7(),
        event_type: EVENT_TYPE.into(),
        payload_type: None,
        payload: serde_json::to_vec(&Order { order: 8, total_cents: 990 }).map_err(fail)?,
        headers: Headers::new(),
        source: "queue 'orders'".into(),
        correlation_id: None,
        created_at: None,
    };
    assert!(inbox.dao().store(&message).await.map_err(fail)?);
    let runs = Arc::new(AtomicI64::new(0));
    let (counted, effects_table) = (runs.clone(), Arc::<str>::from(format!("{prefix}effects")));
    let processing = inbox
        .processor()
        .on_in(EVENT_TYPE, dialect.clone(), move |tx, event: StoredEvent<Order>| {
            let (run, table) = (counted.fetch_add(1, Ordering::SeqCst) + 1, effects_table.clone());
            Box::pin(async move {
                let insert =
                    format!("INSERT INTO {table} (event_id, pid, failed_before) VALUES ($1, $2, $3)");
                sqlx::query(AssertSqlSafe(insert))
                    .bind(event.id)
                    .bind(run)
                    .bind(i64::from(event.source.attempts))
                    .execute(&mut **tx)
                    .await?;
                if run == 1 {
                    // Far past the lease: the message is recovered and run again meanwhile.
                    tokio::time::sleep(Duration::from_millis(1_500)).await;
                }
                Ok(())
            })
        })
        .start()
        .map_err(fail)?;
    let done = until(&**inbox.dao(), message.id, "the take-over's run", |stored| {
        stored.status == InboxStatus::Processed
    })
    .await;
    // Past the first run's end, so that its late settle has happened.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    processing.shutdown(Duration::from_secs(10)).await;
    let outcome = async {
        let done = done?;
        assert_eq!(done.attempts, 1, "the run whose lease ran out counts as a failed one");
        let effects = effects(&dialect, &prefix).await?;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the first run and the take-over");
        assert_eq!(effects, [(message.id, 2, 1)], "one effect, the take-over's");
        Ok(())
    }
    .await;
    for table in [
        format!("{prefix}effects"),
        dialect.tables().inbox().to_owned(),
        dialect.tables().consumed().to_owned(),
    ] {
        let drop = format!("DROP TABLE IF EXISTS {table}");
        sqlx::query(AssertSqlSafe(drop)).execute(dialect.pool()).await.map_err(fail)?;
    }
    outcome
}
