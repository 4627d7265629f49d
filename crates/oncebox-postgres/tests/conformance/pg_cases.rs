//! Cases only PostgreSQL has: one-statement batches, NOTIFY wake-ups and listener reconnects, the
//! partial indexes the relay's queries use, concurrent schema creation, native column types and the
//! tokio-postgres writer. Several engines over one table are in the generic engine suite.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use oncebox_core::config::{Config, EventSettings, Polling};
use oncebox_core::engine::{Engine, EngineHandle, EngineParts};
use oncebox_core::{
    Dialect, ErrorKind, EventStatus, InboxWriter, NewOutboxEvent, OutboxWriter, SchemaPlan, Sender, WakeUp,
};
use oncebox_postgres::PgDialect;
use oncebox_postgres::connect_options;
use oncebox_testkit::dao_suite::{assert_written_alike, make_awkward, new_events};
use oncebox_testkit::engine_suite::fast_polling;
use oncebox_testkit::runner::{Case, Failed, TestResult, fail};
use oncebox_testkit::{DaoHarness, MemoryBroker, case, eventually, with_fresh};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgListener, PgPoolOptions};
use uuid::Uuid;

use super::PgHarness;
use oncebox_testkit::random_prefix;
use oncebox_testkit::sqlx_harness::{SqlxBackend, drop_tables};

/// Every PostgreSQL-only case.
pub fn cases() -> Vec<Case<PgHarness>> {
    vec![
        case!("a_batch_of_1000_is_one_insert_statement", batch_of_1000_is_one_statement),
        case!("notify_is_sent_once_per_type_and_only_on_commit", notify_once_per_type_on_commit),
        case!("claim_recovery_and_clean_up_use_the_partial_indexes", queries_use_partial_indexes),
        case!("concurrent_create_schema_is_safe_and_follows_the_plan", concurrent_create_schema),
        case!("columns_are_uuid_timestamptz_and_jsonb", columns_are_native_types),
        case!("damaged_headers_are_decode_errors_naming_the_row", damaged_headers_are_decode_errors),
        case!("a_lock_timeout_is_a_temporary_error", lock_timeout_is_temporary),
        case!(
            "create_schema_on_existing_tables_does_not_wait_for_readers",
            create_schema_on_existing_tables_does_not_wait_for_readers
        ),
        case!("a_nul_character_fails_the_publish_for_good", nul_character_fails_the_publish),
        case!(
            "a_single_event_is_one_row_insert_writing_the_batch_row",
            single_event_is_one_single_row_insert
        ),
        case!("an_awake_type_is_not_notified", awake_type_is_not_notified),
        case!("a_wake_up_delivers_long_before_the_next_poll", wake_up_delivers_before_the_poll),
        case!("without_wake_ups_an_event_waits_for_the_poll", without_wake_ups_event_waits_for_poll),
        case!("a_listener_reconnect_wakes_every_poller", listener_reconnect_wakes_everyone),
        case!("tokio_postgres_commit_delivers_and_rollback_never", tokio_postgres_commit_and_rollback),
        case!("tokio_postgres_and_sqlx_writers_write_identical_rows", writers_write_identical_rows),
        case!("tokio_postgres_batch_of_1000_is_one_statement", tokio_postgres_batch_is_one_statement),
        case!("tokio_postgres_inbox_records_follow_the_transaction", tokio_postgres_inbox_follows_tx),
    ]
}

const ORDERS: &str = "order-created";
const TOPIC: &str = "orders";

async fn execute(dialect: &PgDialect, sql: String) -> TestResult {
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(dialect.pool()).await.map_err(fail)?;
    Ok(())
}

/// `min-fixed-delay` 5 s, `max-fixed-delay` 1 m: after an empty or short poll the next one is 10 s
/// or more away.
fn slow() -> Polling {
    Polling::Adaptive {
        initial_delay: Duration::ZERO,
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        multiplier: 2.0,
    }
}

async fn start(
    dialect: &PgDialect,
    config: Config,
    sender: Arc<dyn Sender>,
    wake: bool,
) -> Result<EngineHandle, Failed> {
    let mut parts = EngineParts::with_dialect(config, dialect);
    parts.sender = Some(sender);
    if wake {
        parts.wake_source = dialect.wake_source().await.map_err(fail)?;
    }
    Engine::start(parts).map_err(fail)
}

// ---- the writer -------------------------------------------------------------------------------

/// Counts INSERT statements on the events table with a statement-level trigger, whatever their
/// row count; returns the query that reads the count.
async fn count_insert_statements(dialect: &PgDialect) -> Result<String, Failed> {
    let events = dialect.tables().events().to_owned();
    execute(
        dialect,
        format!(
            "CREATE TABLE {events}_statements (n BIGINT NOT NULL);
             INSERT INTO {events}_statements VALUES (0);
             CREATE FUNCTION {events}_count() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN UPDATE {events}_statements SET n = n + 1; RETURN NULL; END $$;
             CREATE TRIGGER {events}_count AFTER INSERT ON {events}
                 FOR EACH STATEMENT EXECUTE FUNCTION {events}_count();"
        ),
    )
    .await?;
    Ok(format!("SELECT n FROM {events}_statements"))
}

async fn stop_counting_insert_statements(dialect: &PgDialect) -> TestResult {
    let events = dialect.tables().events().to_owned();
    execute(dialect, format!("DROP TABLE {events}_statements; DROP FUNCTION {events}_count() CASCADE;")).await
}

async fn batch_of_1000_is_one_statement(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let statements = count_insert_statements(&dialect).await?;
        let mut batch = new_events(ORDERS, 1000);
        for (index, event) in batch.iter_mut().enumerate().skip(500) {
            event.event_type =
                if index % 2 == 0 { "payment-received".into() } else { "order-shipped".into() };
        }
        harness.publish(&dialect, &batch, true).await.map_err(fail)?;
        let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(statements.clone()))
            .fetch_one(dialect.pool())
            .await
            .map_err(fail)?;
        assert_eq!(count, 1, "1,000 events of three types are one INSERT statement");
        let quiet = dialect.clone().with_wake_ups(false);
        harness.publish(&quiet, &new_events(ORDERS, 1000), true).await.map_err(fail)?;
        let (count,): (i64,) =
            sqlx::query_as(AssertSqlSafe(statements)).fetch_one(dialect.pool()).await.map_err(fail)?;
        assert_eq!(count, 2, "without NOTIFY too");
        assert_eq!(
            dialect.outbox_dao().counts().await.map_err(fail)?.status_total(EventStatus::Pending),
            2000
        );
        stop_counting_insert_statements(&dialect).await
    })
    .await
}

async fn notify_once_per_type_on_commit(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut listener = PgListener::connect_with(dialect.pool()).await.map_err(fail)?;
        listener.listen(dialect.channel()).await.map_err(fail)?;

        harness.publish(&dialect, &new_events(ORDERS, 5), false).await.map_err(fail)?;
        let mut mixed = new_events(ORDERS, 3);
        mixed.extend(new_events("payment-received", 2));
        mixed.extend(new_events(ORDERS, 2));
        harness.publish(&dialect, &mixed, true).await.map_err(fail)?;
        let received = heard(&dialect, &mut listener).await?;
        assert_eq!(
            received,
            vec![ORDERS.to_owned(), "payment-received".to_owned()],
            "one notification per event type of the committed call, none for the rolled-back one"
        );
        assert_eq!(dialect.channel(), format!("{}oncebox_wake_ups", dialect.tables().prefix()));
        Ok(())
    })
    .await
}

/// The payloads heard on the dialect's channel up to a marker notified after everything before.
async fn heard(dialect: &PgDialect, listener: &mut PgListener) -> Result<Vec<String>, Failed> {
    sqlx::query("SELECT pg_notify($1, 'marker')")
        .bind(dialect.channel())
        .execute(dialect.pool())
        .await
        .map_err(fail)?;
    let mut received = Vec::new();
    loop {
        let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| fail("no notification within 10 s"))?
            .map_err(fail)?;
        if notification.payload() == "marker" {
            return Ok(received);
        }
        received.push(notification.payload().to_owned());
    }
}

/// A type whose poller in this process is awake gets no NOTIFY, alone or in a batch; once it is
/// asleep again it does.
async fn awake_type_is_not_notified(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut listener = PgListener::connect_with(dialect.pool()).await.map_err(fail)?;
        listener.listen(dialect.channel()).await.map_err(fail)?;
        let activity =
            dialect.poller_activity().ok_or_else(|| fail("wake-ups on: the writer reads awake marks"))?;
        let orders = activity.mark(ORDERS).ok_or_else(|| fail("a mark for the type"))?;
        orders.store(true, std::sync::atomic::Ordering::Release);

        harness.publish(&dialect, &new_events(ORDERS, 1), true).await.map_err(fail)?;
        let mut mixed = new_events(ORDERS, 2);
        mixed.extend(new_events("payment-received", 2));
        harness.publish(&dialect, &mixed, true).await.map_err(fail)?;
        harness.publish(&dialect, &new_events(ORDERS, 3), true).await.map_err(fail)?;
        assert_eq!(
            heard(&dialect, &mut listener).await?,
            ["payment-received"],
            "the awake type was left out"
        );

        orders.store(false, std::sync::atomic::Ordering::Release);
        harness.publish(&dialect, &new_events(ORDERS, 1), true).await.map_err(fail)?;
        assert_eq!(heard(&dialect, &mut listener).await?, [ORDERS], "asleep again, the type is notified");
        assert_eq!(dialect.outbox_dao().counts().await.map_err(fail)?.total(), 9, "every event was written");
        assert!(dialect.with_wake_ups(false).poller_activity().is_none(), "no marks without wake-ups");
        Ok(())
    })
    .await
}

/// One event takes the single-row statement (sqlx and tokio-postgres alike), and its row is the
/// one the batch statement writes.
async fn single_event_is_one_single_row_insert(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let statements = count_insert_statements(&dialect).await?;
        let mut client = tokio_postgres_client(&harness).await?;
        let mut batch = new_events(ORDERS, 2);
        let mut by_sqlx = new_events(ORDERS, 1);
        let mut by_tokio_postgres = new_events(ORDERS, 1);
        for event in batch.iter_mut().chain(&mut by_sqlx).chain(&mut by_tokio_postgres) {
            make_awkward(event);
        }
        harness.publish(&dialect, &batch, true).await.map_err(fail)?;
        harness.publish(&dialect, &by_sqlx, true).await.map_err(fail)?;
        publish_tokio_postgres(&mut client, &dialect, &by_tokio_postgres, true).await?;
        let (count,): (i64,) =
            sqlx::query_as(AssertSqlSafe(statements)).fetch_one(dialect.pool()).await.map_err(fail)?;
        assert_eq!(count, 3, "one statement per publish");
        assert_written_alike(&*dialect.outbox_dao(), &batch[..1], &by_sqlx).await?;
        assert_written_alike(&*dialect.outbox_dao(), &batch[1..], &by_tokio_postgres).await?;
        stop_counting_insert_statements(&dialect).await
    })
    .await
}

// ---- the schema -------------------------------------------------------------------------------

async fn explain(dialect: &PgDialect, template: &str, binds: &[i64]) -> Result<String, Failed> {
    let sql = format!("EXPLAIN {}", dialect.tables().render(template));
    let mut query = sqlx::query_as::<_, (String,)>(AssertSqlSafe(sql));
    if template.contains("claim_token = $3") {
        // The claim: event type, limit, token.
        query = query.bind(ORDERS).bind(binds[0]).bind(Uuid::now_v7());
    } else {
        for value in binds {
            query = query.bind(*value);
        }
    }
    let rows = query.fetch_all(dialect.pool()).await.map_err(fail)?;
    Ok(rows.into_iter().map(|(line,)| line).collect::<Vec<_>>().join("\n"))
}

async fn queries_use_partial_indexes(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let events = dialect.tables().events().to_owned();
        for _ in 0..5 {
            harness.publish(&dialect, &new_events(ORDERS, 1000), true).await.map_err(fail)?;
        }
        // A realistic table: far more processed rows (mostly young) than backlog.
        execute(
            &dialect,
            format!(
                "INSERT INTO {events} (id, event_type, payload, payload_type, status, attempts, next_retry_at,
                     created_at, updated_at, processed_at)
                 SELECT gen_random_uuid(), 'order-created', '{{}}', 'T', 'PROCESSED', 1, now(), now(),
                     now() - i * INTERVAL '1 second', now()
                 FROM generate_series(1, 40000) AS i;
                 ANALYZE {events};"
            ),
        )
        .await?;
        let claim = explain(&dialect, include_str!("../../sql/claim.sql"), &[200]).await?;
        assert!(
            claim.contains(&format!("{events}_pending")),
            "the claim should use the pending index:\n{claim}"
        );
        let recover =
            explain(&dialect, include_str!("../../sql/recover_stuck.sql"), &[600_000_000, 100, 5]).await?;
        assert!(recover.contains(&format!("{events}_in_process")), "recovery:\n{recover}");
        let clean_up =
            explain(&dialect, include_str!("../../sql/delete_processed.sql"), &[36_000_000_000, 100]).await?;
        assert!(clean_up.contains(&format!("{events}_processed")), "clean-up:\n{clean_up}");
        let to_dlq = explain(&dialect, include_str!("../../sql/dlq_transfer_to.sql"), &[100]).await?;
        assert!(to_dlq.contains(&format!("{events}_failed")), "transfer to the DLQ:\n{to_dlq}");
        Ok(())
    })
    .await
}

async fn table_names(dialect: &PgDialect) -> Result<Vec<String>, Failed> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE tablename LIKE $1 || '%'")
            .bind(dialect.tables().prefix())
            .fetch_all(dialect.pool())
            .await
            .map_err(fail)?;
    Ok(rows.into_iter().map(|(name,)| name).collect())
}

async fn concurrent_create_schema(harness: Arc<PgHarness>) -> TestResult {
    let prefix = random_prefix();
    let mut dialects = Vec::new();
    for _ in 0..4 {
        dialects.push(harness.0.connect(&prefix, 2).await.map_err(fail)?);
    }
    let first = dialects[0].clone();
    let outcome = AssertUnwindSafe(async {
        let inbox_only = SchemaPlan { inbox: true, ..SchemaPlan::default() };
        first.create_schema(inbox_only).await.map_err(fail)?;
        let mut names = table_names(&first).await?;
        names.sort();
        let mut inbox_tables = vec![first.tables().consumed().to_owned(), first.tables().inbox().to_owned()];
        inbox_tables.sort();
        assert_eq!(names, inbox_tables, "an inbox-only plan creates only the inbox tables");
        let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
        let mut tasks = Vec::new();
        for dialect in &dialects {
            let dialect = dialect.clone();
            tasks.push(tokio::spawn(async move { dialect.create_schema(everything).await }));
        }
        for task in tasks {
            task.await.map_err(fail)?.map_err(fail)?;
        }
        first.create_schema(everything).await.map_err(fail)?;
        let mut names = table_names(&first).await?;
        names.sort();
        let tables = first.tables();
        let mut expected = vec![
            tables.events().to_owned(),
            tables.dlq().to_owned(),
            tables.consumed().to_owned(),
            tables.inbox().to_owned(),
            tables.jobs().to_owned(),
        ];
        expected.sort();
        assert_eq!(names, expected);
        Ok::<_, Failed>(())
    })
    .catch_unwind()
    .await;
    let dropped = drop_tables(first.pool(), first.tables()).await;
    for dialect in dialects {
        dialect.pool().close().await;
    }
    match outcome {
        Err(panic) => std::panic::resume_unwind(panic),
        Ok(result) => {
            result?;
            dropped.map_err(fail)
        }
    }
}

async fn columns_are_native_types(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |_harness, dialect| async move {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT column_name::text, data_type::text FROM information_schema.columns WHERE table_name = $1",
        )
        .bind(dialect.tables().events())
        .fetch_all(dialect.pool())
        .await
        .map_err(fail)?;
        let type_of =
            |column: &str| rows.iter().find(|(name, _)| name == column).map(|(_, kind)| kind.as_str());
        assert_eq!(type_of("id"), Some("uuid"));
        assert_eq!(type_of("claim_token"), Some("uuid"));
        assert_eq!(type_of("headers"), Some("jsonb"));
        assert_eq!(type_of("payload"), Some("text"));
        for column in ["next_retry_at", "created_at", "updated_at", "processed_at"] {
            assert_eq!(type_of(column), Some("timestamp with time zone"), "{column}");
        }
        Ok(())
    })
    .await
}

async fn damaged_headers_are_decode_errors(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let events = new_events(ORDERS, 1);
        harness.publish(&dialect, &events, true).await.map_err(fail)?;
        let id = events[0].id;
        let table = dialect.tables().events().to_owned();
        execute(&dialect, format!("UPDATE {table} SET headers = '[1, 2]' WHERE id = '{id}'")).await?;
        let error =
            dialect.outbox_dao().get(id).await.err().ok_or_else(|| fail("bad headers should not decode"))?;
        assert_eq!(error.kind(), ErrorKind::Decode);
        assert!(error.to_string().contains(&id.to_string()), "{error}");
        assert!(error.to_string().contains(&format!("{table}.headers")), "{error}");
        Ok(())
    })
    .await
}

async fn lock_timeout_is_temporary(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let lock = dialect.job_lock();
        let taken =
            lock.try_lock("job", Uuid::now_v7(), Duration::ZERO, Duration::ZERO).await.map_err(fail)?;
        assert!(taken.is_some());
        // Another instance whose sessions give up waiting for a row lock after 50 ms.
        let options = connect_options(harness.0.url()).map_err(fail)?.options([("lock_timeout", "50ms")]);
        let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await.map_err(fail)?;
        let impatient = PgDialect::new(pool).with_tables(dialect.tables());
        let mut holder = dialect.pool().begin().await.map_err(fail)?;
        let jobs = &dialect.tables().jobs();
        sqlx::query(AssertSqlSafe(format!("SELECT * FROM {jobs} FOR UPDATE")))
            .execute(&mut *holder)
            .await
            .map_err(fail)?;
        let error =
            impatient.job_lock().try_lock("job", Uuid::now_v7(), Duration::ZERO, Duration::ZERO).await;
        holder.rollback().await.map_err(fail)?;
        let error = error.err().ok_or_else(|| fail("the lock should time out waiting for the row"))?;
        assert_eq!(error.kind(), ErrorKind::Database);
        assert!(error.is_temporary(), "lock_not_available (55P03) must be temporary: {error}");
        assert!(error.to_string().contains("locking job job"), "{error}");
        impatient.pool().close().await;
        Ok(())
    })
    .await
}

/// Every start re-runs the schema: with the tables in place it must not queue behind a long read
/// of the outbox (an ACCESS EXCLUSIVE lock would, and every publisher would queue behind it).
async fn create_schema_on_existing_tables_does_not_wait_for_readers(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let options = connect_options(harness.0.url()).map_err(fail)?.options([("lock_timeout", "200ms")]);
        let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await.map_err(fail)?;
        let restarting = PgDialect::new(pool).with_tables(dialect.tables());
        let mut reader = dialect.pool().begin().await.map_err(fail)?;
        let events = dialect.tables().events();
        sqlx::query(AssertSqlSafe(format!("SELECT count(*) FROM {events}")))
            .execute(&mut *reader)
            .await
            .map_err(fail)?;
        let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
        let created = restarting.create_schema(everything).await;
        reader.rollback().await.map_err(fail)?;
        restarting.pool().close().await;
        created.map_err(|error| fail(format!("create_schema waited for a reader of the outbox: {error}")))
    })
    .await
}

async fn nul_character_fails_the_publish(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut events = new_events(ORDERS, 2);
        events[1].payload = "before\0after".into();
        let error = harness.publish(&dialect, &events, true).await.err();
        let error = error.ok_or_else(|| fail("PostgreSQL text cannot hold NUL; the publish should fail"))?;
        assert_eq!(error.kind(), ErrorKind::Database);
        assert!(!error.is_temporary(), "retrying cannot help: {error}");
        assert_eq!(dialect.outbox_dao().counts().await.map_err(fail)?.total(), 0, "nothing was written");
        Ok(())
    })
    .await
}

// ---- wake-ups ---------------------------------------------------------------------------------

/// Starts an engine with slow polling, lets its first poll deliver one event, then commits a
/// second while the poller sleeps. Returns how long after the first delivery the second arrived,
/// or `None` when it did not arrive within `wait`.
async fn second_event_delay(
    dialect: &PgDialect,
    harness: &PgHarness,
    wait: Duration,
) -> Result<Option<Duration>, Failed> {
    let first = new_events(ORDERS, 1);
    harness.publish(dialect, &first, true).await.map_err(fail)?;
    let broker = MemoryBroker::new();
    let config =
        Config::builder().event(ORDERS, EventSettings::new(TOPIC).polling(slow())).build().map_err(fail)?;
    let engine = start(dialect, config, Arc::new(broker.clone()), true).await?;
    let outcome = async {
        eventually("the first poll delivers the first event", Duration::from_secs(20), || {
            let broker = broker.clone();
            async move { Ok(broker.delivery_counts().len() == 1) }
        })
        .await?;
        // The poller has polled and now sleeps 10 s (a short batch doubles the 5 s minimum).
        let first_delivered = Instant::now();
        let second = new_events(ORDERS, 1);
        harness.publish(dialect, &second, true).await.map_err(fail)?;
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if broker.delivery_counts().contains_key(&second[0].id) {
                return Ok(Some(first_delivered.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, Failed>(None)
    }
    .await;
    engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
    outcome
}

async fn wake_up_delivers_before_the_poll(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let delay = second_event_delay(&dialect, &harness, Duration::from_secs(3)).await?;
        let delay = delay.ok_or_else(|| fail("the NOTIFY did not wake the poller within 3 s"))?;
        assert!(delay < Duration::from_secs(5), "delivered after {delay:?}, before the poll would have run");
        Ok(())
    })
    .await
}

async fn without_wake_ups_event_waits_for_poll(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let quiet = dialect.with_wake_ups(false);
        assert!(quiet.wake_source().await.map_err(fail)?.is_none(), "no wake-up source when off");
        let delay = second_event_delay(&quiet, &harness, Duration::from_secs(2)).await?;
        assert_eq!(delay, None, "without wake-ups the event waits for the next poll, 10 s away");
        Ok(())
    })
    .await
}

async fn listener_reconnect_wakes_everyone(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |_harness, dialect| async move {
        let mut source = dialect.pg_wake_source().await.map_err(fail)?;
        let (listener_pid,): (i32,) = sqlx::query_as(
            r#"SELECT pid FROM pg_stat_activity WHERE query = format('LISTEN "%s"', $1::text)
               ORDER BY backend_start DESC LIMIT 1"#,
        )
        .bind(dialect.channel())
        .fetch_one(dialect.pool())
        .await
        .map_err(fail)?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(dialect.channel())
            .bind(ORDERS)
            .execute(dialect.pool())
            .await
            .map_err(fail)?;
        assert_eq!(next_hint(&mut source).await?, Some(WakeUp::EventType(ORDERS.into())));

        // The listener's connection is killed: hints sent meanwhile are lost, so it asks for a full poll.
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(listener_pid)
            .execute(dialect.pool())
            .await
            .map_err(fail)?;
        assert_eq!(next_hint(&mut source).await?, Some(WakeUp::All));
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(dialect.channel())
            .bind("payment-received")
            .execute(dialect.pool())
            .await
            .map_err(fail)?;
        assert_eq!(
            next_hint(&mut source).await?,
            Some(WakeUp::EventType("payment-received".into())),
            "listening again"
        );
        Ok(())
    })
    .await
}

/// The next hint of `source`, waiting at most 15 s.
async fn next_hint(source: &mut oncebox_postgres::PgWakeSource) -> Result<Option<WakeUp>, Failed> {
    tokio::time::timeout(Duration::from_secs(15), oncebox_core::WakeSource::next(source))
        .await
        .map_err(|_| fail("no wake-up within 15 s"))
}

// ---- the tokio-postgres writer ----------------------------------------------------------------

/// A tokio-postgres client on its own connection task.
async fn tokio_postgres_client(harness: &PgHarness) -> Result<tokio_postgres::Client, Failed> {
    let (client, connection) =
        tokio_postgres::connect(harness.0.url(), tokio_postgres::NoTls).await.map_err(fail)?;
    tokio::spawn(async move {
        // The connection ends when the client is dropped; an error then has no one to report to.
        let _ = connection.await;
    });
    Ok(client)
}

/// Writes `events` through the tokio-postgres writer in a new transaction.
async fn publish_tokio_postgres(
    client: &mut tokio_postgres::Client,
    dialect: &PgDialect,
    events: &[NewOutboxEvent],
    commit: bool,
) -> TestResult {
    let tx = client.transaction().await.map_err(fail)?;
    dialect.writer().write(&tx, events).await.map_err(fail)?;
    if commit { tx.commit().await.map_err(fail) } else { tx.rollback().await.map_err(fail) }
}

async fn tokio_postgres_commit_and_rollback(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut client = tokio_postgres_client(&harness).await?;
        let mut listener = PgListener::connect_with(dialect.pool()).await.map_err(fail)?;
        listener.listen(dialect.channel()).await.map_err(fail)?;
        let rolled_back = new_events(ORDERS, 3);
        publish_tokio_postgres(&mut client, &dialect, &rolled_back, false).await?;
        let committed = new_events(ORDERS, 4);
        publish_tokio_postgres(&mut client, &dialect, &committed, true).await?;
        publish_tokio_postgres(&mut client, &dialect, &[], true).await?;

        let outbox = dialect.outbox_dao();
        for event in &committed {
            let row =
                outbox.get(event.id).await.map_err(fail)?.ok_or_else(|| fail("committed event missing"))?;
            assert_eq!(row.status, EventStatus::Pending);
        }
        for event in &rolled_back {
            assert!(outbox.get(event.id).await.map_err(fail)?.is_none(), "rolled back");
        }
        let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .map_err(|_| fail("no notification within 10 s"))?
            .map_err(fail)?;
        assert_eq!(notification.payload(), ORDERS, "the committed write notified");

        // The whole relay delivers what tokio-postgres published.
        let broker = MemoryBroker::new();
        let config = Config::builder()
            .event(ORDERS, EventSettings::new(TOPIC).polling(fast_polling()))
            .build()
            .map_err(fail)?;
        let engine = start(&dialect, config, Arc::new(broker.clone()), true).await?;
        let delivered = eventually("the committed events are delivered", Duration::from_secs(20), || {
            let broker = broker.clone();
            async move { Ok(broker.delivery_counts().len() == 4) }
        })
        .await;
        engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
        delivered?;
        let counts = broker.delivery_counts();
        assert!(rolled_back.iter().all(|event| !counts.contains_key(&event.id)), "rolled back never");
        Ok(())
    })
    .await
}

async fn writers_write_identical_rows(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut client = tokio_postgres_client(&harness).await?;
        let mut by_sqlx = new_events(ORDERS, 2);
        let mut by_tokio_postgres = new_events(ORDERS, 2);
        make_awkward(&mut by_sqlx[0]);
        make_awkward(&mut by_tokio_postgres[0]);
        harness.publish(&dialect, &by_sqlx, true).await.map_err(fail)?;
        publish_tokio_postgres(&mut client, &dialect, &by_tokio_postgres, true).await?;

        assert_written_alike(&*dialect.outbox_dao(), &by_sqlx, &by_tokio_postgres).await?;
        // The stored text of every column matches too (JSONB normalizes both the same way).
        let table = &dialect.tables().events();
        let sql = format!(
            "SELECT event_type, payload, payload_type, headers::text, partition_key, status, attempts,
                    claim_token IS NULL, processed_at IS NULL, last_error IS NULL
             FROM {table} WHERE id = $1"
        );
        type Columns = (String, String, String, String, Option<String>, String, i32, bool, bool, bool);
        let by_id = |id: Uuid| {
            let sql = sql.clone();
            let pool = dialect.pool().clone();
            async move {
                sqlx::query_as::<_, Columns>(AssertSqlSafe(sql)).bind(id).fetch_one(&pool).await.map_err(fail)
            }
        };
        assert_eq!(by_id(by_sqlx[0].id).await?, by_id(by_tokio_postgres[0].id).await?);
        assert_eq!(by_id(by_sqlx[1].id).await?, by_id(by_tokio_postgres[1].id).await?);
        Ok(())
    })
    .await
}

async fn tokio_postgres_batch_is_one_statement(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let statements = count_insert_statements(&dialect).await?;
        let mut client = tokio_postgres_client(&harness).await?;
        let mut batch = new_events(ORDERS, 1000);
        for event in batch.iter_mut().skip(600) {
            event.event_type = "payment-received".into();
        }
        publish_tokio_postgres(&mut client, &dialect, &batch, true).await?;
        let quiet = dialect.clone().with_wake_ups(false);
        publish_tokio_postgres(&mut client, &quiet, &new_events(ORDERS, 1000), true).await?;
        let (count,): (i64,) =
            sqlx::query_as(AssertSqlSafe(statements)).fetch_one(dialect.pool()).await.map_err(fail)?;
        assert_eq!(count, 2, "each batch of 1,000 is one INSERT statement");
        let counts = dialect.outbox_dao().counts().await.map_err(fail)?;
        assert_eq!(counts.status_total(EventStatus::Pending), 2000);
        stop_counting_insert_statements(&dialect).await
    })
    .await
}

async fn tokio_postgres_inbox_follows_tx(harness: Arc<PgHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut client = tokio_postgres_client(&harness).await?;
        let writer = dialect.writer();
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let mut tx = client.transaction().await.map_err(fail)?;
        assert!(InboxWriter::record(&writer, &mut tx, "billing", ids[0]).await.map_err(fail)?);
        tx.rollback().await.map_err(fail)?;
        assert!(dialect.inbox_dao().consumed("billing", &ids).await.map_err(fail)?.is_empty(), "rolled back");

        assert!(dialect.inbox_dao().record("billing", ids[1]).await.map_err(fail)?);
        let mut tx = client.transaction().await.map_err(fail)?;
        let input = [ids[2], ids[1], ids[0], ids[2]];
        let new = InboxWriter::record_many(&writer, &mut tx, "billing", &input).await.map_err(fail)?;
        assert_eq!(new, vec![ids[2], ids[0]], "new ids in input order, each once");
        assert!(
            !InboxWriter::record(&writer, &mut tx, "billing", ids[0]).await.map_err(fail)?,
            "a duplicate"
        );
        tx.commit().await.map_err(fail)?;
        assert_eq!(dialect.inbox_dao().consumed("billing", &ids).await.map_err(fail)?, ids);
        Ok(())
    })
    .await
}
